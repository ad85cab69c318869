"""Start a run's ranks on this machine: in this process when there is one, else one process per rank
through the engine's launcher (torch's elastic agent: a failing rank stops the others and its own
message comes back as a ``RankError``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..engine import launch
from ..rank import Plan, RankContext, run_rank

__all__ = ["launch_local"]


def launch_local(spec: RunConfig, plan: Plan, out: Path) -> list[Any]:
    if spec.world_size == 1:  # K = 1, one replica: no process group, the plan is reused
        return [run_rank(spec, RankContext(out, plan))]
    # SIGINT/SIGTERM stay with this process (runner.stop); the ranks ignore Ctrl-C.
    return launch(run_rank, spec.world_size, (spec, RankContext(out, ignore_sigint=True)),
                  threads=spec.train.threads, handle_signals=False)
