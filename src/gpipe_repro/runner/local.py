"""The engine's ranks of a run: held to their memory (``runner.guard``), then started on this machine
— in this process when there is one, else one process per rank through the engine's launcher
(torch's elastic agent: a failing rank stops the others and its own message comes back as a
``RankError``) — or, under torchrun or SLURM, this process as rank 0 of the job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..config.device import release_cached
from ..engine import launch
from ..errors import UserError
from ..rank import RankContext, run_rank
from ..runplan.model import ModelPlan
from ..runplan.plan import RunPlan
from .guard import check_memory, watched

__all__ = ["run_ranks"]


def run_ranks(
    plan: RunPlan, model: ModelPlan, out: Path, launcher: str, run_id: str | None
) -> list[Any]:
    """The ranks' results. Every rank gets the plan (plain data); each rebuilds the meta model it
    was made from."""
    spec = plan.spec
    if spec.train.memory_check:
        check_memory(plan)
    if launcher != "local":  # torchrun or SLURM started the job's ranks: this process is rank 0
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world != spec.world_size:
            raise UserError(
                f"the job has {world} ranks but pipeline.K*pipeline.replicas = "
                f"{spec.pipeline.K}*{spec.pipeline.replicas} = {spec.world_size}"
            )
        results = run_rank(spec, plan, RankContext(out, run_id, model, gather=True))
        assert results is not None
        return list(results)
    # more than one rank: a process each; SIGINT/SIGTERM stay with this process (runner.stop), the
    # ranks ignore Ctrl-C
    if spec.world_size > 1:
        with watched(out, spec.pipeline.heartbeat_s, spec.pipeline.K):
            return launch(
                run_rank,
                spec.world_size,
                (spec, plan, RankContext(out, run_id, ignore_sigint=True)),
                threads=spec.train.threads,
                handle_signals=False,
            )
    try:  # K = 1, one replica: no process group, the meta model is reused
        return [run_rank(spec, plan, RankContext(out, run_id, model))]
    finally:  # this process runs a sweep's next job: its cached blocks go back
        release_cached(spec.device)
