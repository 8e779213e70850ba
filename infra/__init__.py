"""`det deploy aws|gcp`: Pulumi programs for a whole cluster in a cloud account.

`options.py` holds what a user asks for (the CLI's flags, validated); `aws/` and `gcp/` hold the
Pulumi programs built from them; the master instance's boot script is `master_boot/`.
"""
