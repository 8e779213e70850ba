"""Run a Trial class: ``python3 -m controlplane.exec.harness model_def:MyTrial``.

What ``--trial model_def:MyTrial`` of the launchers runs in each worker (and the legacy
``entrypoint: model_def:MyTrial``), from the context directory (the cwd, put on ``sys.path``).
On the cluster the trial's hyperparameters, seed and config come from the task; the length is
``searcher.max_length`` (or adaptive ASHA's ``max_time`` in ``time_metric``), validation and
checkpoints follow ``min_validation_period`` / ``min_checkpoint_period``, metrics are reported every
``scheduling_unit`` batches, and a restarted trial resumes from its latest checkpoint. With
several workers (``WORLD_SIZE`` > 1, set by the launcher) it joins the torch process group.

Off the cluster: ``--config const.yaml`` gives the hyperparameters (the first sample) and the
periods, ``--max-length N`` the number of batches, checkpoints go to ``--checkpoint-dir``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import random
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("controlplane.exec.harness")
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"  # Determined's, parsed by the log shipper


class HarnessError(Exception):
    """A problem with the trial or its config, told to the user in one line."""


def load_trial_class(spec: str) -> type:
    """``module:Class`` (``Class`` may be dotted) from the cwd, which must be the context."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise HarnessError(f"the trial must be given as module:Class (e.g. model_def:MyTrial), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "determined":
            raise HarnessError(f"{module_name} imports Determined's package ({e.name}); port it by changing "
                               "`from determined import pytorch` to `from controlplane import pytorch`") from e
        if e.name == module_name:
            raise HarnessError(f"no module {module_name!r} in the context directory {cwd}") from e
        raise
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise HarnessError(f"module {module_name!r} has no {qualname!r}")
        obj = getattr(obj, part)
    from controlplane import pytorch

    if not isinstance(obj, type) or not issubclass(obj, pytorch.PyTorchTrial):
        raise HarnessError(f"{spec} is not a controlplane.pytorch.PyTorchTrial subclass (the only Trial class "
                           "this harness runs)")
    return obj


def _off_cluster_config(path: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, first hyperparameter sample) of an experiment YAML, validated as the CLI does."""
    if not path:
        return {}, {}
    from controlplane.config.errors import ConfigError
    from controlplane.config.experiment import parse_experiment_config
    from controlplane.config.yaml_io import load_yaml
    from controlplane.searchers.sampling import sample

    try:
        cfg = parse_experiment_config(load_yaml(Path(path).read_text(), path))
    except (OSError, ConfigError) as e:
        raise HarnessError(f"cannot use experiment config {path}: {e}") from None
    config = cfg.to_dict()
    return config, sample(cfg.hyperparameters, random.Random(cfg.reproducibility.experiment_seed))


def run(trial_spec: str, *, config_path: str | None = None, max_length: int | None = None,
        checkpoint_dir: str | None = None, latest_checkpoint: str | None = None, test_mode: bool = False) -> int:
    from controlplane import core, pytorch
    from controlplane.pytorch._units import TrainUnit

    trial_class = load_trial_class(trial_spec)
    info = core.get_cluster_info()
    on_cluster = info is not None and info.trial is not None
    if on_cluster:
        assert info is not None and info.trial is not None
        config, hparams = info.trial.config, info.trial.hparams
        latest_checkpoint = info.latest_checkpoint
    else:
        config, hparams = _off_cluster_config(config_path)
    with pytorch.init(hparams=hparams, exp_conf=config, checkpoint_dir=checkpoint_dir) as context:
        if context.distributed.rank != 0:
            logging.getLogger().setLevel(logging.WARNING)
        gbs = context._global_batch_size
        length: TrainUnit | None = pytorch.Batch(max_length) if max_length else None
        if length is None and not on_cluster:
            from controlplane.pytorch._trainer import _max_length_from_config

            length = _max_length_from_config(config, gbs)
            if length is None:
                raise HarnessError("off the cluster give --max-length N (batches), or --config with "
                                   "searcher.max_length")
        log.info("training %s with %s", trial_class.__name__, hparams)
        trial = trial_class(context)
        pytorch.Trainer(trial, context).fit(
            max_length=length,
            checkpoint_period=TrainUnit._from_config(config.get("min_checkpoint_period"), "min_checkpoint_period",
                                                     gbs),
            validation_period=TrainUnit._from_config(config.get("min_validation_period"), "min_validation_period",
                                                     gbs),
            reporting_period=pytorch.Batch(int(config.get("scheduling_unit") or 100)),
            checkpoint_policy=str(config.get("checkpoint_policy") or "best"),
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=bool(config.get("perform_initial_validation", False)),
            test_mode=test_mode,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m controlplane.exec.harness",
                                description="Train a controlplane.pytorch.PyTorchTrial (module:Class).")
    p.add_argument("trial", metavar="MODULE:CLASS")
    p.add_argument("--config", help="off the cluster: experiment config for hyperparameters and periods")
    p.add_argument("--max-length", type=int, metavar="BATCHES", help="off the cluster: batches to train")
    p.add_argument("--checkpoint-dir", help="off the cluster: where checkpoints go (./checkpoints)")
    p.add_argument("--latest-checkpoint", metavar="UUID", help="off the cluster: resume from this checkpoint")
    p.add_argument("--test-mode", action="store_true", help="off the cluster: one batch, one validation batch")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    try:
        return run(args.trial, config_path=args.config, max_length=args.max_length,
                   checkpoint_dir=args.checkpoint_dir, latest_checkpoint=args.latest_checkpoint,
                   test_mode=args.test_mode)
    except HarnessError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
