"""The master's checkpoint GC loop; the deciding and deleting live in
`controlplane.checkpoint_gc` (policy) and `controlplane.master.checkpoint_gc.collect`."""
