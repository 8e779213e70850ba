"""Entry points that run inside a task (Determined's ``determined.exec``)."""
