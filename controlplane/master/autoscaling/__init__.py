"""The acting half of autoscaling: per-pool reconcilers that call a provisioner and keep
instance records; the deciding half is the pure planner in `controlplane.autoscaler`."""
