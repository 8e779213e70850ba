"""Train the spirals MLP with the core API: metrics, checkpoints, resume, preemption.

Runs on the cluster (`det experiment create const.yaml .`) and on a laptop (`python train.py`):
off the cluster, core.init() prints the metrics and keeps checkpoints in ./checkpoints.
"""

from __future__ import annotations

import json
import pathlib

import torch
from model import mlp, spirals
from torch import nn

from controlplane import core

DEFAULTS = {"lr": 0.05, "hidden": 32, "layers": 2, "dropout": 0.0, "batch_size": 64}
LENGTH_OFF_CLUSTER = 200  # batches, when no searcher gives the length
REPORT_EVERY = 25
VALIDATE_EVERY = 100


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return {"validation_loss": loss, "accuracy": accuracy}


def main() -> None:
    with core.init() as ctx:
        info = ctx.info
        hp = {**DEFAULTS, **(info.trial.hparams if info else {})}
        seed = info.trial.trial_seed if info else 0
        torch.manual_seed(seed)
        x_train, y_train = spirals(2048, seed=1)
        x_val, y_val = spirals(512, seed=2)
        model = mlp(int(hp["hidden"]), int(hp["layers"]), float(hp["dropout"]))
        opt = torch.optim.Adam(model.parameters(), lr=float(hp["lr"]))
        batch_size = int(hp["batch_size"])

        steps = 0
        latest = info.latest_checkpoint if info else None
        if latest:
            with ctx.checkpoint.restore_path(latest) as path:
                state = torch.load(pathlib.Path(path) / "state.pt")
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["opt"])
                steps = json.loads((pathlib.Path(path) / "metadata.json").read_text())["steps_completed"]
            print(f"resumed from checkpoint {latest} at batch {steps}")

        # On the cluster the searcher says how long to train (searcher.max_length).
        for op in ctx.searcher.operations() if info else [None]:
            length = op.length if op else LENGTH_OFF_CLUSTER
            print(f"training {hp} for {length} batches")
            g = torch.Generator().manual_seed(seed + steps)
            running = 0.0
            metrics: dict[str, float] = {}
            while steps < length:
                idx = torch.randint(0, len(x_train), (batch_size,), generator=g)
                loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                running += loss.item()
                if steps % REPORT_EVERY == 0:
                    ctx.train.report_training_metrics(steps, {"loss": running / REPORT_EVERY})
                    running = 0.0
                if steps % VALIDATE_EVERY == 0 or steps == length:
                    metrics = evaluate(model, x_val, y_val)
                    ctx.train.report_validation_metrics(steps, metrics)
                    with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _uuid):
                        torch.save({"model": model.state_dict(), "opt": opt.state_dict()},
                                   pathlib.Path(path) / "state.pt")
                    if op:
                        op.report_progress(steps)
                    # A stop that comes with the last batch (ASHA's, after a full-length trial's last
                    # validation) ends a finished trial: it reports completed below, not preempted.
                    if steps < length and ctx.preempt.should_preempt():
                        print(f"preempted at batch {steps}; the next run resumes from here")
                        return
            if op:
                op.report_completed(metrics.get("validation_loss"))
        print(f"done: {evaluate(model, x_val, y_val)}")


if __name__ == "__main__":
    main()
