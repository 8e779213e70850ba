"""Every route handler of the master, in one list for create_app."""

from controlplane.master.api import (
    agents,
    allocations,
    checkpoints,
    experiments,
    info,
    logs,
    metrics,
    tasks,
    users,
)

ALL = [
    info.get_info,
    info.get_master,
    users.login,
    users.logout,
    users.get_me,
    users.list_users,
    users.set_password,
    experiments.create,
    experiments.list_experiments,
    experiments.get_experiment,
    experiments.experiment_trials,
    experiments.get_trial,
    experiments.pause,
    experiments.activate,
    experiments.kill,
    experiments.cancel,
    experiments.model_def,
    *agents.ROUTES,
    *allocations.ROUTES,
    *tasks.ROUTES,
    *logs.ROUTES,
    *metrics.ROUTES,
    *checkpoints.ROUTES,
]
