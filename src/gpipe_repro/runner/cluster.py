"""Ranks started by a cluster: torch.distributed variables for a task of a SLURM/submitit job.

Under ``torchrun`` the variables are already there. A submitit job with several tasks (``hydra/launcher=
submitit_slurm hydra.launcher.tasks_per_node=P``, or ``submitit_local``) runs the Hydra job function once
per task; ``task_env`` gives each task its RANK / WORLD_SIZE / LOCAL_WORLD_SIZE / MASTER_ADDR /
MASTER_PORT so it acts as one rank of the run (validated against its own host's devices).
"""

from __future__ import annotations

import os
import zlib

__all__ = ["task_env"]


def task_env() -> dict[str, str] | None:
    """torch.distributed variables for this task of a multi-task submitit job, else None."""
    if not any(
        k in os.environ for k in ("SUBMITIT_LOCAL_JOB_ID", "SUBMITIT_EXECUTOR", "SLURM_JOB_ID")
    ):
        return None
    try:
        import submitit

        env = submitit.JobEnvironment()
    except Exception:  # noqa: BLE001 - not inside a submitit job
        return None
    if env.num_tasks <= 1:
        return None
    host = "127.0.0.1" if "SUBMITIT_LOCAL_JOB_ID" in os.environ else env.hostnames[0]
    port = 20000 + zlib.crc32(str(env.job_id).encode()) % 20000
    return {
        "RANK": str(env.global_rank),
        "WORLD_SIZE": str(env.num_tasks),
        "LOCAL_RANK": str(env.local_rank),
        "LOCAL_WORLD_SIZE": str(max(1, env.num_tasks // max(1, env.num_nodes))),
        "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
    }
