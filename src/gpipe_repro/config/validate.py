"""Validate a composed config once, at the edge, into the typed run spec the runner receives.

Each field is checked against its own metadata (``opt``: choices, min, max); then what one field alone
cannot say (M divides the per-replica batch, balance has K cells, ...). Messages are one line naming
the key, the value and what is allowed. Engine errors (``engine.ArgumentError``, in the engine's own
terms) are mapped to config keys here and nowhere else (``engine_error``).
"""

from __future__ import annotations

import os
from dataclasses import is_dataclass, replace
from typing import Any

from ..engine import ArgumentError, check_schedule
from ..engine.checkpoint import CHECKPOINT_MODES
from ..errors import UserError
from ..options import check_fields
from .schema import RunConfig

__all__ = [
    "validate",
    "engine_error",
    "resolve_backend",
    "resolve_device",
    "auto_conflict",
    "ENGINE_KEYS",
    "AUTO_PLANNED",
]

# The engine's parameter names -> the config keys that set them.
ENGINE_KEYS = {
    "K": "pipeline.K",
    "M": "pipeline.M",
    "checkpoint": "pipeline.checkpoint",
    "schedule": "pipeline.schedule",
    "virtual_stages": "pipeline.virtual_stages",
    "balance": "pipeline.balance",
    "kind": "pipeline.balance_by",
    "replicas": "pipeline.replicas",
    "host_memory": "pipeline.host_memory",
    "precision": "train.precision",
}


def engine_error(err: ArgumentError) -> UserError:
    """The engine's message with its argument spelled as the config key that sets it."""
    key = ENGINE_KEYS.get(err.arg)
    return UserError(err.renamed(key) if key else str(err))


def _check_option(section: str, cfg: Any, registry: dict[str, Any]) -> Any:
    name = getattr(cfg, "name", cfg)
    if not is_dataclass(cfg) or name not in registry:
        raise UserError(f"{section}.name={name!r} is not allowed; allowed: {', '.join(registry)}")
    return registry[name]


def validate(
    cfg: RunConfig, cuda_available: bool | None = None, sweep_world: int | None = None
) -> RunConfig:
    """Check ``cfg`` and resolve ``device=auto`` and ``backend=auto``; returns the run spec (a new
    object). ``sweep_world``: the largest K*replicas of the sweep this job belongs to — both autos
    decide for it, so every job of a sweep decides the same."""
    from ..data import DATASETS
    from ..models import MODELS
    from ..optim import OPTIMIZERS

    _check_option("model", cfg.model, MODELS)
    _check_option("data", cfg.data, DATASETS)
    optim = _check_option("optim", cfg.optim, OPTIMIZERS)
    check_fields(cfg, "")
    # What a dataset can say about itself without loading (a root missing).
    if hasattr(cfg.data, "check"):
        cfg.data.check()
    if optim.check is not None:
        optim.check(cfg.optim)
    p, t = cfg.pipeline, cfg.train
    # The batch grows with M at a fixed micro-batch (GPipe's point).
    if t.micro_batch_size is not None:
        t = replace(t, batch_size=p.M * p.replicas * t.micro_batch_size)
        cfg = replace(cfg, train=t)
    modes = [p.checkpoint] if isinstance(p.checkpoint, str) else list(p.checkpoint)
    if (not isinstance(p.checkpoint, str) and len(modes) != p.K) or any(
        m not in CHECKPOINT_MODES for m in modes
    ):
        raise UserError(
            f"pipeline.checkpoint={p.checkpoint!r} is not allowed; allowed: "
            f"{', '.join(CHECKPOINT_MODES)}, or a list of pipeline.K={p.K} of them"
        )
    if not isinstance(p.checkpoint, str):
        cfg = replace(cfg, pipeline=replace(p, checkpoint=modes))
        p = cfg.pipeline
    try:  # the schedule's own rules on K, M and the cells per rank
        check_schedule(p.schedule, p.K, p.M, p.virtual_stages)
    except ArgumentError as err:
        raise engine_error(err) from None
    if p.balance is not None:
        cells = p.K * p.virtual_stages
        if len(p.balance) != cells:
            per = f" x pipeline.virtual_stages={p.virtual_stages}" if p.virtual_stages > 1 else ""
            raise UserError(
                f"pipeline.balance={list(p.balance)} has {len(p.balance)} cells but "
                f"pipeline.K={p.K}{per}" + (f" = {cells}" if per else "")
            )
        if any(b < 1 for b in p.balance):
            raise UserError(
                f"pipeline.balance={list(p.balance)} has a cell with {min(p.balance)} layers; "
                "every cell needs at least 1"
            )
    if t.resume is not None and t.init_from is not None:
        raise UserError(
            f"train.resume={t.resume} and train.init_from={t.init_from} exclude each other; "
            "allowed: one of them (resume continues a run, init_from starts one from weights)"
        )
    if t.warmup_steps is not None and t.warmup_steps >= t.steps:
        raise UserError(
            f"train.warmup_steps={t.warmup_steps} leaves no timed step; allowed: null or "
            f"0..{t.steps - 1} (train.steps={t.steps})"
        )
    per_replica, rem = divmod(t.batch_size, p.replicas)
    if rem:
        raise UserError(
            f"pipeline.replicas={p.replicas} does not divide train.batch_size={t.batch_size}"
        )
    if p.M > per_replica:
        raise UserError(
            f"pipeline.M={p.M} exceeds the mini-batch of {per_replica} per replica; "
            f"allowed: 1..{per_replica}"
        )
    if per_replica % p.M:
        raise UserError(
            f"pipeline.M={p.M} does not divide train.batch_size={t.batch_size}"
            + (f" / {p.replicas} replicas" if p.replicas > 1 else "")
            + f"; allowed: a divisor of {per_replica}"
        )
    from .device import local_ranks

    if cfg.plan.mode == "auto":
        cfg = _auto_devices(cfg, _cuda_count(cuda_available, 1))
    ranks = cfg.plan.devices if cfg.plan.mode == "auto" else cfg.world_size
    here = local_ranks(max(ranks or 1, sweep_world or 0))  # this host's ranks: one GPU each
    count = _cuda_count(cuda_available, here)
    device = resolve_device(cfg.device, count > 0, here, count)
    backend = resolve_backend(cfg.backend, device, here, count)
    if backend == "sim":
        from ..sim.hardware import MEASURED, HardwareError
        from ..sim.measured.link import link_pairs

        try:
            cfg.hardware.check()  # one line when the profile is invalid
        except HardwareError as err:
            raise UserError(str(err)) from None
        unpaired = link_pairs(device) if cfg.hardware.name == MEASURED else None
        if unpaired and cfg.world_size > 1 and cuda_available is None:
            raise UserError(
                f"pipeline.K*pipeline.replicas = {cfg.world_size} ranks on device=cuda: {unpaired}"
            )
    elif device == "cuda" and cuda_available is None and local_ranks(cfg.world_size) > count:
        raise UserError(
            f"pipeline.K*pipeline.replicas = {cfg.world_size} ranks, "
            f"{local_ranks(cfg.world_size)} of them on this host, but it has {count} CUDA "
            "device(s); one rank per device (nccl cannot put two ranks on one device): lower "
            "pipeline.K, or simulate with backend=sim (or backend=auto)"
        )
    if cfg.plan.mode == "auto" and backend == "sim" and cfg.plan.devices is None:
        raise UserError(
            "plan=auto with backend=sim needs plan.devices (a simulated device has no count); "
            "allowed: an integer >= 1"
        )
    return replace(cfg, device=device, backend=backend)


# What plan=auto chooses itself: a user's value for any of these is refused (``preflight`` names
# the override; this names a value set anywhere else, e.g. by an experiment).
AUTO_PLANNED = (
    "pipeline.K",
    "pipeline.M",
    "pipeline.replicas",
    "pipeline.schedule",
    "pipeline.virtual_stages",
    "pipeline.checkpoint",
    "pipeline.balance",
    "train.micro_batch_size",
    "train.batch_mode",
)


def auto_conflict(overrides: list[str]) -> str | None:
    """One line when a command line sets plan=auto and an option it chooses (even to its
    default), or None."""
    keys = {o.partition("=")[0].lstrip("+~"): o for o in overrides}
    auto = next(
        (o for k, o in keys.items() if k in ("plan", "plan.mode") and o.endswith("=auto")), None
    )
    if auto is None:
        return None
    for key, o in keys.items():
        if key in AUTO_PLANNED or key == "pipeline":
            return f"{o} conflicts with {auto}, which chooses it; allowed: one of them"
    return None


def _auto_devices(cfg: RunConfig, cuda_devices: int) -> RunConfig:
    """plan=auto: refuse pipeline options set beside it; resolve ``plan.devices`` where the engine
    runs (null: this host's CUDA devices where it has any and ``device`` allows them, else one CPU
    rank per ``train.threads`` of the cores this process may run on, so no two ranks share one)."""
    from .schema import PipelineConfig, TrainConfig

    defaults = {"pipeline": PipelineConfig(), "train": TrainConfig()}
    for key in AUTO_PLANNED:
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value != getattr(defaults[section], name):
            raise UserError(
                f"{key}={value} conflicts with plan=auto, which chooses it; allowed: leave {key} "
                "unset, or plan=manual"
            )
    if cfg.plan.devices is not None or cfg.backend == "sim":
        return cfg
    if cfg.device != "cpu" and cuda_devices > 0:
        devices = cuda_devices
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        devices = max(1, (cores or 1) // cfg.train.threads)
    return replace(cfg, plan=replace(cfg.plan, devices=devices))


def _cuda_count(cuda_available: bool | None, ranks_here: int) -> int:
    """CUDA devices of this host as torch sees them; ``cuda_available`` overrides whether there
    are any (False: none; True without a CUDA build: as many as the host's ranks)."""
    import torch

    real = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cuda_available is None:
        return real
    return (real or ranks_here) if cuda_available else 0


def resolve_backend(backend: str, device: str, ranks_here: int, device_count: int) -> str:
    """``auto``: the engine where the host has a CUDA device for each of its ranks, else the
    simulator (a CPU host always simulates: its ranks would share its cores)."""
    if backend != "auto":
        return backend
    return "engine" if device == "cuda" and device_count >= ranks_here else "sim"


def resolve_device(device: str, cuda_available: bool, ranks_here: int, device_count: int) -> str:
    """``auto``: CUDA where the host has a device for each of its ranks, else the CPU (more ranks
    than GPUs would be refused, or crowd a GPU)."""
    if device == "auto":
        return "cuda" if cuda_available and device_count >= ranks_here else "cpu"
    if device == "cuda" and not cuda_available:
        raise UserError("device='cuda' but no CUDA device is available; allowed here: auto, cpu")
    return device
