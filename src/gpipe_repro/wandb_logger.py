"""wandb, offline by default: one run per job, one summary run per sweep.

Online mode with no reachable server hangs for minutes, so ``offline`` is the default and the
README explains ``wandb sync``. Tests run with ``WANDB_MODE=disabled``. Every run is finished
before the job returns, or later jobs of a multirun would log into it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .config import LoggerSpec

__all__ = ["log_run", "log_sweep_table"]


def _mode(spec: LoggerSpec) -> str:
    return os.environ.get("WANDB_MODE", spec.mode)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
    return out


def log_run(spec: LoggerSpec, out_dir: Path, config: dict[str, Any], metrics: dict[str, Any],
            group: str | None) -> str | None:
    """Log one job; returns the wandb run folder (or None when disabled)."""
    if spec.name != "wandb" or _mode(spec) == "disabled":
        return None
    import wandb

    pipe = metrics.get("pipeline") or {}
    name = spec.name_format.format(K=pipe.get("K"), M=pipe.get("M"), **{k: v for k, v in pipe.items() if k not in ("K", "M")})
    run = wandb.init(project=spec.project, group=spec.group or group, name=name, dir=str(out_dir),
                     mode=_mode(spec), config=config, reinit="finish_previous")
    try:
        for i, loss in enumerate(metrics.get("losses") or []):
            run.log({"loss": loss}, step=i)
        run.summary.update(_flat({k: v for k, v in metrics.items() if k not in ("losses", "step_times_s", "layer_costs")}))
        return str(Path(run.dir).parent)
    finally:
        run.finish()


def log_sweep_table(spec: LoggerSpec, out_dir: Path, columns: list[str], rows: list[list[Any]],
                    group: str | None) -> str | None:
    if spec.name != "wandb" or _mode(spec) == "disabled":
        return None
    import wandb

    run = wandb.init(project=spec.project, group=spec.group or group, name="sweep-summary",
                     job_type="summary", dir=str(out_dir), mode=_mode(spec), reinit="finish_previous")
    try:
        run.log({"results": wandb.Table(columns=columns, data=rows)})
        return str(Path(run.dir).parent)
    finally:
        run.finish()
