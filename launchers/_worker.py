"""``python3 -m launchers._worker (deepspeed|horovod) -- CMD...``: one worker started by DeepSpeed's
launch or horovodrun, given the variables every launcher here promises (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DET_CHIEF_IP,
DET_DIST_PORTS) from that tool's own names, then run under ``launchers.wrap_rank RANK`` in this
same process (no extra interpreter start)."""

from __future__ import annotations

import os
import sys

from launchers import wrap_rank

# Our name <- the tool's names, first set wins (the tool's own names stay as they are).
_FROM: dict[str, dict[str, tuple[str, ...]]] = {
    "deepspeed": {"LOCAL_WORLD_SIZE": ("LOCAL_SIZE",), "GROUP_RANK": ("CROSS_RANK",),
                  "GROUP_WORLD_SIZE": ("CROSS_SIZE",)},
    "horovod": {"RANK": ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"), "LOCAL_RANK": ("HOROVOD_LOCAL_RANK",),
                "WORLD_SIZE": ("HOROVOD_SIZE",), "LOCAL_WORLD_SIZE": ("HOROVOD_LOCAL_SIZE",),
                "GROUP_RANK": ("HOROVOD_CROSS_RANK",), "GROUP_WORLD_SIZE": ("HOROVOD_CROSS_SIZE",),
                "CROSS_RANK": ("HOROVOD_CROSS_RANK",), "CROSS_SIZE": ("HOROVOD_CROSS_SIZE",)},
}


def fill_env(tool: str, env: dict[str, str]) -> dict[str, str]:
    out = dict(env)
    for ours, theirs in _FROM[tool].items():
        if out.get(ours):
            continue
        for name in theirs:
            if out.get(name):
                out[ours] = out[name]
                break
    if out.get("DET_CHIEF_IP") and not out.get("MASTER_ADDR"):
        out["MASTER_ADDR"] = out["DET_CHIEF_IP"]
    if out.get("MASTER_ADDR") and not out.get("DET_CHIEF_IP"):
        out["DET_CHIEF_IP"] = out["MASTER_ADDR"]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[0] not in _FROM or args[1] != "--":
        raise SystemExit("usage: python3 -m launchers._worker (deepspeed|horovod) -- CMD...")
    filled = fill_env(args[0], dict(os.environ))
    os.environ.update({k: v for k, v in filled.items() if os.environ.get(k) != v})
    return wrap_rank.main(["RANK", "--", *args[2:]])


if __name__ == "__main__":
    sys.exit(main())
