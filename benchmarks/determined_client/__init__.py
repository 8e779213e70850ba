"""Helpers for `benchmarks/determined_client_score.py`, which scores Determined 0.38.1's unmodified
client against this master: the shared settings (settings.py); the verdicts, their helpers and the
report (scoreboard.py); the cluster of the run, the master's REST reads and the client's ``det``
(cluster.py); Determined's tutorial files and the configs built from them (workloads.py); and the
three groups of checks: ``cli`` (cli_checks.py, which runs cli_admin_checks.py,
cli_experiment_checks.py and cli_live_work_checks.py in that order), ``sdk`` (sdk_checks.py) and
``harness`` (harness_checks.py)."""
