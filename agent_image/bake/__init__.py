"""`det agent-image bake aws|gcp`: the baked agent image.

A builder instance is launched from a base image, provisioned over SSH with the steps of
`steps.plan` (the project in a venv, bubblewrap, the boot unit of `files/`, optionally the NVIDIA
driver), stopped and turned into an image (`aws.bake`, `gcp.bake`). The builder and everything made
for it are always removed, also when a step fails or the bake is interrupted.
"""
