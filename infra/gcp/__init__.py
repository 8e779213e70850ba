"""The GCP Pulumi program of `det deploy gcp`: `program.build(opts)` inside a Pulumi program.

`network.py` (VPC, subnetwork, Cloud NAT, firewall rules), `iam.py` (service accounts and their
roles), `storage.py` (the checkpoint bucket), `database.py` (Cloud SQL on a private address),
`master.py` (the master instance and its address).
"""
