"""Runs whose ranks are started by someone else: ``torchrun`` or a SLURM/submitit job.

``gpipe-run`` starts its ranks itself on one machine. Across machines the ranks come from the
cluster, each with RANK / WORLD_SIZE / MASTER_ADDR in its environment, and the Hydra app must not be
wrapped (every rank would compose its own config and output folder). So:

- torchrun: ``torchrun --nnodes N --nproc-per-node P -m gpipe_repro.multinode --out DIR [overrides]``:
  every rank composes the same config with Hydra's compose API (no output folder of its own), runs
  its stage, and rank 0 gathers the results and writes DIR/metrics.json, trace.json, timeline.png.
- SLURM: ``gpipe-run hydra/launcher=submitit_slurm hydra.launcher.tasks_per_node=P ...``: each task
  of the job runs the Hydra job function, which sees the submitit environment and acts as one rank
  (``task_env``); rank 0 writes the outputs. ``submitit_local`` runs the same thing on one machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from pathlib import Path
from typing import Any

from .config import RunSpec, spec_from_config
from .errors import UserError

__all__ = ["task_env", "run_distributed", "main"]


def task_env() -> dict[str, str] | None:
    """torch.distributed variables for this task of a multi-task submitit job, else None."""
    if not any(k in os.environ for k in ("SUBMITIT_LOCAL_JOB_ID", "SUBMITIT_EXECUTOR", "SLURM_JOB_ID")):
        return None
    try:
        import submitit

        env = submitit.JobEnvironment()
    except Exception:
        return None
    if env.num_tasks <= 1:
        return None
    host = "127.0.0.1" if "SUBMITIT_LOCAL_JOB_ID" in os.environ else env.hostnames[0]
    port = 20000 + zlib.crc32(str(env.job_id).encode()) % 20000
    return {"RANK": str(env.global_rank), "WORLD_SIZE": str(env.num_tasks), "LOCAL_RANK": str(env.local_rank),
            "MASTER_ADDR": host, "MASTER_PORT": str(port)}


def run_distributed(spec: RunSpec, out: Path, launcher: str) -> dict[str, Any] | None:
    """Run this rank; rank 0 merges every rank's result and writes the run's files."""
    from .metrics.summary import failed_metrics
    from .runner import finish_run, write_json
    from .worker import run_rank

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != spec.world_size:
        raise UserError(f"the job has {world} ranks but pipeline.K*pipeline.replicas = "
                        f"{spec.pipeline.K}*{spec.pipeline.replicas} = {spec.world_size}")
    try:
        results = run_rank(spec, gather=True)
    except Exception as err:
        if rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / "metrics.json", failed_metrics(spec, str(err).splitlines()[0] if str(err) else repr(err)))
        raise
    if rank != 0:
        return None
    out.mkdir(parents=True, exist_ok=True)
    return finish_run(spec, results, out, launcher)


def main(argv: list[str] | None = None) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from .cli import CONF_DIR, preflight
    from .runner import resolve_device

    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.multinode",
                                 description="One rank of a run started by torchrun (see module docstring).")
    ap.add_argument("--out", required=True, help="folder for metrics.json, trace.json, timeline.png (rank 0)")
    ap.add_argument("overrides", nargs="*", help="the same overrides gpipe-run takes")
    args = ap.parse_args(argv)
    err = preflight(args.overrides)
    if err:
        print(f"gpipe-run: error: {err}", file=sys.stderr)
        sys.exit(2)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=args.overrides)
    plain = OmegaConf.to_container(cfg, resolve=True)
    try:
        spec = spec_from_config(plain, resolve_device)  # type: ignore[arg-type]
    except UserError as e:
        if os.environ.get("RANK", "0") == "0":
            print(f"gpipe-run: error: {e}", file=sys.stderr)
        sys.exit(1)
    m = run_distributed(spec, Path(args.out), "torchrun")
    if m is not None:
        print(f"K={spec.pipeline.K} M={spec.pipeline.M}: {m['throughput']:.1f} samples/s -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
