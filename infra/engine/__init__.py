"""The Pulumi engine behind `det deploy aws|gcp up|down|list`, kept behind a small interface.

`model.py` is the interface (what the CLI needs from a stack) that tests fake; `pulumi_engine.py`
implements it with Pulumi's Automation API; `backend.py` says where state and the secrets
passphrase live; `guard.py` decides which planned replacements need a confirmation; `update.py`
is the `up` flow over any stack (preview, guard, secrets, up).
"""
