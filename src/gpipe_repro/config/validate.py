"""Validate a composed config once, at the edge, into the typed run spec the runner receives.

Each field is checked against its own metadata (``opt``: choices, min, max); then what one field alone
cannot say (M divides the per-replica batch, balance has K cells, ...). Messages are one line naming
the key, the value and what is allowed. Engine errors (``engine.ArgumentError``, in the engine's own
terms) are mapped to config keys here and nowhere else (``engine_error``).
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any

from ..engine import ArgumentError
from ..errors import UserError
from .options import allowed_text
from .schema import RunConfig

__all__ = ["validate", "check_fields", "engine_error", "ENGINE_KEYS"]

# The engine's parameter names -> the config keys that set them.
ENGINE_KEYS = {
    "K": "pipeline.K", "M": "pipeline.M", "checkpoint": "pipeline.checkpoint", "schedule": "pipeline.schedule",
    "balance": "pipeline.balance", "kind": "pipeline.balance_by", "replicas": "pipeline.replicas",
    "host_memory": "pipeline.host_memory", "precision": "train.precision",
}


def engine_error(err: ArgumentError) -> UserError:
    """The engine's message with its argument spelled as the config key that sets it."""
    key = ENGINE_KEYS.get(err.arg)
    return UserError(err.renamed(key) if key else str(err))


def check_fields(obj: Any, path: str) -> None:
    """Each field of the dataclass ``obj`` (recursively) against its ``opt`` metadata."""
    for f in fields(obj):
        v = getattr(obj, f.name)
        key = f"{path}.{f.name}" if path else f.name
        if is_dataclass(v):
            check_fields(v, key)
            continue
        m = f.metadata
        if v is None or isinstance(v, bool):
            continue
        if m.get("choices") and v not in m["choices"]:
            raise UserError(f"{key}={v!r} is not allowed; allowed: {allowed_text(f)}")
        if isinstance(v, (int, float)) and ((m.get("min") is not None and v < m["min"])
                                            or (m.get("max") is not None and v > m["max"])):
            raise UserError(f"{key}={v} is invalid; allowed: {allowed_text(f)}")


def _check_option(section: str, cfg: Any, registry: dict[str, Any]) -> Any:
    if not is_dataclass(cfg) or getattr(cfg, "name", None) not in registry:
        name = getattr(cfg, "name", cfg)
        raise UserError(f"{section}.name={name!r} is not allowed; allowed: {', '.join(registry)}")
    return registry[cfg.name]


def validate(cfg: RunConfig, cuda_available: bool | None = None) -> RunConfig:
    """Check ``cfg`` and resolve ``device=auto``; returns the run spec (a new object)."""
    from ..data import DATASETS
    from ..models import MODELS
    from ..optim import OPTIMIZERS

    _check_option("model", cfg.model, MODELS)
    _check_option("data", cfg.data, DATASETS)
    optim = _check_option("optim", cfg.optim, OPTIMIZERS)
    check_fields(cfg, "")
    if hasattr(cfg.data, "check"):  # what a dataset can say about itself without loading (a root missing)
        cfg.data.check()
    if optim.check is not None:
        optim.check(cfg.optim)
    p, t = cfg.pipeline, cfg.train
    if p.balance is not None:
        if len(p.balance) != p.K:
            raise UserError(f"pipeline.balance={list(p.balance)} has {len(p.balance)} cells but pipeline.K={p.K}")
        if any(b < 1 for b in p.balance):
            raise UserError(f"pipeline.balance={list(p.balance)} has a cell with {min(p.balance)} layers; "
                            "every cell needs at least 1")
    if t.resume is not None and t.init_from is not None:
        raise UserError(f"train.resume={t.resume} and train.init_from={t.init_from} exclude each other; "
                        "allowed: one of them (resume continues a run, init_from starts one from weights)")
    if t.warmup_steps is not None and t.warmup_steps >= t.steps:
        raise UserError(f"train.warmup_steps={t.warmup_steps} leaves no timed step; allowed: null or "
                        f"0..{t.steps - 1} (train.steps={t.steps})")
    per_replica, rem = divmod(t.batch_size, p.replicas)
    if rem:
        raise UserError(f"pipeline.replicas={p.replicas} does not divide train.batch_size={t.batch_size}")
    if p.M > per_replica:
        raise UserError(f"pipeline.M={p.M} exceeds the mini-batch of {per_replica} per replica; "
                        f"allowed: 1..{per_replica}")
    if per_replica % p.M:
        raise UserError(f"pipeline.M={p.M} does not divide train.batch_size={t.batch_size}"
                        + (f" / {p.replicas} replicas" if p.replicas > 1 else "")
                        + f"; allowed: a divisor of {per_replica}")
    device = resolve_device(cfg.device, cuda_available)
    if cfg.backend == "sim":
        from ..runner.simulated import hardware_profile

        hardware_profile(cfg.hardware)  # one line when the profile is invalid
    elif device == "cuda" and cuda_available is None:
        import torch

        n = torch.cuda.device_count()
        if cfg.world_size > n:
            raise UserError(f"pipeline.K*pipeline.replicas = {cfg.world_size} ranks but this host has {n} CUDA "
                            f"device(s); one rank per device: lower pipeline.K, or simulate with backend=sim")
    return replace(cfg, device=device)


def resolve_device(device: str, cuda_available: bool | None = None) -> str:
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    if device == "cuda" and not cuda_available:
        raise UserError("device='cuda' but no CUDA device is available; allowed here: auto, cpu")
    return device
