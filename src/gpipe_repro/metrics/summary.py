"""Merge every rank's result into the ``metrics.json`` contract (see ARCHITECTURE.md)."""

from __future__ import annotations

import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

import torch

from ..config import RunSpec
from ..engine.events import Event, measured_bubble

__all__ = ["summarize", "failed_metrics", "env_info"]


def git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parents[3]
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def env_info(results: list[dict] | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                            "host": platform.node(), "git_commit": git_commit()}
    if results:
        info["device_names"] = sorted({r["device_name"] for r in results})
        info["threads_per_rank"] = results[0]["threads"]
        info["host_memory"] = sorted({r["host_memory"] for r in results})  # what each rank has in effect
    return info


def _base(spec: RunSpec) -> dict[str, Any]:
    p = spec.pipeline
    return {
        "model": {"name": spec.model, **spec.model_params},
        "data": {"name": spec.data, **spec.data_params},
        "pipeline": {"K": p.K, "M": p.M, "checkpoint": p.checkpoint, "schedule": p.schedule,
                     "balance": p.balance, "balance_by": p.balance_by, "replicas": p.replicas},
        "batch_size": spec.train.batch_size, "steps": spec.train.steps,
        "warmup_steps": spec.train.warmup_steps, "seed": spec.seed,
        "device": "cuda" if spec.device.startswith("cuda") else "cpu",
        "world_size": spec.world_size, "optim": spec.optim.name, "experiment": spec.experiment,
    }


def failed_metrics(spec: RunSpec | None, error: str, cfg: dict | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": "failed", "error": error}
    if spec is not None:
        out.update(_base(spec))
    elif cfg is not None:  # the config did not validate: keep what the user asked for
        pipe = cfg.get("pipeline") or {}
        out["model"] = {"name": (cfg.get("model") or {}).get("name")}
        out["pipeline"] = {k: pipe.get(k) for k in ("K", "M", "checkpoint", "schedule", "balance", "replicas")}
        out["batch_size"] = (cfg.get("train") or {}).get("batch_size")
    out["env"] = env_info()
    return out


def summarize(spec: RunSpec, results: list[dict], tokens_per_sample: int = 0) -> tuple[dict[str, Any], list[Event]]:
    """metrics.json content and the replica-0 events of the kept steps."""
    K = spec.pipeline.K
    W = spec.train.warmup_steps
    results = sorted(results, key=lambda r: r["rank"])
    # Step time: the slowest rank of each step, median over the timed steps.
    per_step = [max(r["step_times"][s] for r in results) for s in range(spec.train.steps)]
    timed = per_step[W:]
    step_time = statistics.median(timed)
    # Global loss: mean over the replicas' last stages.
    lasts = [r for r in results if r["stage"] == K - 1]
    losses = [statistics.fmean(vals) for vals in zip(*[r["losses"] for r in lasts])]
    rep0 = [r for r in results if r["replica"] == 0]
    events = [Event(**e) for r in rep0 for e in r["events"]]
    steps = sorted({e.step for e in events if e.step >= W})
    bubbles, busy_per_stage = [], []
    for s in steps:
        evs = [e for e in events if e.step == s and e.action != "step"]
        _, bubble, busy = measured_bubble(evs, K)
        bubbles.append(bubble)
        busy_per_stage.append(busy)
    stages = []
    for r in rep0:
        accounted = r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] + r["activation_bytes"]
        cuda = r["cuda_peak_bytes"]
        stages.append({
            "stage": r["stage"], "layers": r["layers"], "layer_names": r["layer_names"],
            "param_count": r["param_count"], "param_bytes": r["param_bytes"], "grad_bytes": r["grad_bytes"],
            "optimizer_bytes": r["optimizer_bytes"], "activation_bytes": r["activation_bytes"],
            "peak_memory_bytes": cuda if cuda is not None else accounted,
            "accounted_memory_bytes": accounted,
            "memory_source": "cuda_allocator" if cuda is not None else "accounted",
            "busy_s": statistics.median([b[r["stage"]] for b in busy_per_stage]) if busy_per_stage else 0.0,
        })
    ev = next((r["eval"] for r in lasts if r["replica"] == 0), None)
    metrics = _base(spec)
    metrics["model"]["param_count"] = sum(s["param_count"] for s in stages)
    metrics["pipeline"]["balance"] = results[0]["balance"]
    metrics.update({
        "status": "ok", "error": None,
        "losses": losses,
        "step_time_s": step_time,
        "step_times_s": per_step,
        "throughput": spec.train.batch_size / step_time,
        "bubble_fraction": statistics.median(bubbles) if bubbles else 0.0,
        "bubble_ideal": (K - 1) / (spec.pipeline.M + K - 1),
        "stages": stages,
        "layer_costs": results[0]["costs"],
        "env": env_info(results),
    })
    if tokens_per_sample:
        metrics["tokens_per_s"] = metrics["throughput"] * tokens_per_sample
    if ev is not None:
        metrics["eval"] = ev
    keep = set(steps[-spec.train.trace_steps:])
    return metrics, [e for r in results for e in (Event(**d) for d in r["events"]) if e.step in keep]
