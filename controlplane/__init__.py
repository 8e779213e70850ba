"""The control plane: master, `det` CLI, core API for training code, shared config schemas.

`from controlplane import core` is the training-side API; it is a subpackage so that
importing it pulls in nothing of the master.
"""
