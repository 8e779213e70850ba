"""The AWS Pulumi program of `det deploy aws`: `program.build(opts)` inside a Pulumi program.

One file per concern: `network.py` (VPC, subnets, routes), `security.py` (security groups),
`iam.py` (roles, instance profiles, policy documents), `storage.py` (the checkpoint bucket),
`database.py` (RDS), `master.py` (the master instance and its address).
"""
