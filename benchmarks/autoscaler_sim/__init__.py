"""Helpers for `benchmarks/autoscaler_sim.py`: the workload trace and its oracle (workload.py), the
discrete-event cluster with its scheduler and bill (cluster.py), and the two scaling rules that
drive it (policies.py): the real planner, and Determined's rule rebuilt from the reference."""
