"""One run: validate, start the ranks, merge their results, write the run's files.

Writes ``metrics.json`` (always, ``status: failed`` with a one-line ``error`` when anything goes
wrong), ``trace.json`` (Chrome trace) and ``timeline.png`` into the run's folder. K = 1 with one
replica runs in this process; otherwise one process per rank through the engine's launcher.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from .config import RunSpec
from .data import DataInfo, build_dataset
from .engine import RankError, chrome_trace, launch
from .errors import UserError
from .metrics.summary import failed_metrics, summarize
from .metrics.timeline import plot_timeline
from .worker import run_rank

__all__ = ["run", "resolve_device", "write_json", "finish_run"]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device='cuda' but no CUDA device is available; allowed here: auto, cpu")
    return device


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_jsonable, allow_nan=False))
    tmp.replace(path)


def _jsonable(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def finish_run(spec: RunSpec, results: list[dict], out_dir: Path, launcher: str = "local",
               info: DataInfo | None = None) -> dict[str, Any]:
    """Merge the ranks' results and write metrics.json, trace.json and timeline.png."""
    info = info or build_dataset(spec.data, spec.data_params).info
    metrics, events = summarize(spec, results, info.tokens_per_sample)
    metrics["env"]["launcher"] = launcher
    write_json(out_dir / "trace.json", chrome_trace(events))
    last = max((e.step for e in events), default=0)
    plot_timeline([e for e in events if e.step == last], spec.pipeline.K, out_dir / "timeline.png",
                  f"{spec.model}  K={spec.pipeline.K}  M={spec.pipeline.M}  {spec.pipeline.schedule}"
                  f"  checkpoint={spec.pipeline.checkpoint}  (step {last})")
    write_json(out_dir / "metrics.json", metrics)
    return metrics


def check_model(spec: RunSpec) -> DataInfo:
    """Build the model on the meta device (no memory) and check K and balance against its layers.
    Returns the dataset's shapes (the dataset itself stays with the ranks)."""
    from .engine.partition import check_balance, check_k
    from .models import get_model

    info = build_dataset(spec.data, spec.data_params).info
    with torch.device("meta"):
        n = len(get_model(spec.model).layers(info, spec.model_params))
    try:
        check_k(spec.pipeline.K, n)
        if spec.pipeline.balance is not None:
            check_balance(spec.pipeline.balance, n)
    except ValueError as err:
        raise UserError(str(err)) from None
    return info


def run(spec: RunSpec, out_dir: Path) -> dict[str, Any]:
    """Run ``spec``; never raises for a failed run: returns (and writes) the failed metrics."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        info = check_model(spec)
        if spec.world_size == 1:
            results = [run_rank(spec)]
        else:
            results = launch(run_rank, spec.world_size, (spec,), threads=spec.train.threads)
        return finish_run(spec, results, out_dir, info=info)
    except (UserError, RankError, ValueError) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        metrics = failed_metrics(spec, msg)
    except Exception as err:  # a bug, not a user mistake: keep the type in the one line
        metrics = failed_metrics(spec, f"{type(err).__name__}: {err}".splitlines()[0])
    write_json(out_dir / "metrics.json", metrics)
    return metrics
