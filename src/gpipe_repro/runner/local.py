"""The engine's ranks of a run: held to their memory (``runner.guard``), then started on this machine
— in this process when there is one, else one process per rank through the engine's launcher
(torch's elastic agent: a failing rank stops the others and its own message comes back as a
``RankError``) — or, under torchrun or SLURM, this process as rank 0 of the job."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..config.device import release_cached
from ..engine import RankError, launch
from ..errors import UserError
from ..rank import HEARTBEAT_DIR, RankContext, run_rank
from ..runplan.model import ModelPlan
from ..runplan.plan import RunPlan
from .guard import Watchdog, check_memory, oom_kills

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
    if spec.world_size == 1:  # K = 1, one replica: no process group, the meta model is reused
        try:
            return [run_rank(spec, plan, RankContext(out, run_id, model))]
        finally:  # this process runs a sweep's next job: its cached blocks go back
            release_cached(spec.device)
    # SIGINT/SIGTERM stay with this process (runner.stop); the ranks ignore Ctrl-C.
    shutil.rmtree(out / HEARTBEAT_DIR, ignore_errors=True)
    kills = oom_kills()
    with Watchdog(out, spec.pipeline.heartbeat_s) as dog:
        try:
            return launch(
                run_rank,
                spec.world_size,
                (spec, plan, RankContext(out, run_id, ignore_sigint=True)),
                threads=spec.train.threads,
                handle_signals=False,
            )
        except RankError as err:
            raise _explain(err, spec, dog, kills) from None
        finally:
            shutil.rmtree(out / HEARTBEAT_DIR, ignore_errors=True)


def _explain(err: RankError, spec: RunConfig, dog: Watchdog, kills_before: int | None) -> RankError:
    """Name the rank that caused the failure when the launcher can only see its echo."""
    K = spec.pipeline.K
    if dog.frozen is not None:
        r, age = dog.frozen
        return RankError(
            r,
            f"rank {r} (stage {r % K}, replica {r // K}) stopped responding: no heartbeat for "
            f"{age:.0f} s (stopped, e.g. by SIGSTOP, or frozen); the run was stopped",
        )
    after = oom_kills()
    if kills_before is not None and after is not None and after > kills_before:
        return RankError(
            err.rank,
            f"rank {err.rank}: killed by the kernel's out-of-memory killer; the run needs "
            "more memory than this host has (see train.memory_check and the plan)",
        )
    return err
