"""Typed run specification, validated from the composed Hydra config.

The runner and the ranks receive a ``RunSpec`` (plain dataclasses, picklable); config objects stop
here. Every check names the field, the value and what is allowed, in one line, so a bad override
fails before any rank starts and the message is the same from the CLI, a sweep or torchrun.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import UserError

__all__ = ["RunSpec", "PipelineSpec", "TrainSpec", "OptimSpec", "LoggerSpec", "spec_from_config"]

CHECKPOINTS = ("never", "except_last", "always")
SCHEDULES = ("gpipe", "1f1b")
HOST_MEMORY = ("retain", "system")
COSTS = ("params", "flops", "time", "memory")
DEVICES = ("auto", "cpu", "cuda")
OPTIMS = ("rmsprop", "sgd", "adam")
LOGGERS = ("wandb", "none")
WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class PipelineSpec:
    K: int = 1
    M: int = 1
    checkpoint: str = "except_last"
    schedule: str = "gpipe"
    balance: list[int] | None = None
    balance_by: str = "params"
    replicas: int = 1
    timeout_s: float = 300.0
    host_memory: str = "retain"


@dataclass
class TrainSpec:
    batch_size: int = 64
    steps: int = 10
    warmup_steps: int = 2
    threads: int = 1
    eval: bool = True
    eval_batch_size: int = 256
    progress: bool = True
    trace_steps: int = 2


@dataclass
class OptimSpec:
    name: str = "rmsprop"
    lr: float = 1e-3
    momentum: float = 0.0
    weight_decay: float = 0.0
    alpha: float = 0.9
    eps: float = 1e-8
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class LoggerSpec:
    name: str = "none"
    project: str = "gpipe-repro"
    mode: str = "offline"
    group: str | None = None
    name_format: str = "K{K}-M{M}"


@dataclass
class RunSpec:
    model: str
    model_params: dict[str, Any]
    data: str
    data_params: dict[str, Any]
    pipeline: PipelineSpec = field(default_factory=PipelineSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    optim: OptimSpec = field(default_factory=OptimSpec)
    logger: LoggerSpec = field(default_factory=LoggerSpec)
    seed: int = 0
    device: str = "cpu"
    experiment: str | None = None

    @property
    def world_size(self) -> int:
        return self.pipeline.K * self.pipeline.replicas

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- field checks
def _int(sec: Mapping, path: str, key: str, lo: int | None = None, default: Any = None) -> int:
    v = sec.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise UserError(f"{_p(path, key)}={v!r} is not an integer" + (f"; allowed: an integer >= {lo}" if lo is not None else ""))
    if lo is not None and v < lo:
        raise UserError(f"{_p(path, key)}={v} is invalid; allowed: an integer >= {lo}")
    return v


def _float(sec: Mapping, path: str, key: str, lo: float | None = None, default: Any = None) -> float:
    v = sec.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UserError(f"{_p(path, key)}={v!r} is not a number")
    if lo is not None and v < lo:
        raise UserError(f"{_p(path, key)}={v} is invalid; allowed: a number >= {lo}")
    return float(v)


def _choice(sec: Mapping, path: str, key: str, allowed: tuple[str, ...], default: Any = None) -> str:
    v = sec.get(key, default)
    if v not in allowed:
        raise UserError(f"{_p(path, key)}={v!r} is not allowed; allowed: {', '.join(allowed)}")
    return str(v)


def _bool(sec: Mapping, path: str, key: str, default: Any = None) -> bool:
    v = sec.get(key, default)
    if not isinstance(v, bool):
        raise UserError(f"{_p(path, key)}={v!r} is not a boolean; allowed: true, false")
    return v


def _balance(v: Any) -> list[int] | None:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or not all(isinstance(b, int) and not isinstance(b, bool) for b in v):
        raise UserError(f"pipeline.balance={v!r} is invalid; allowed: null or a list of layer counts, e.g. [3,5]")
    bal = list(v)
    if any(b < 1 for b in bal):
        raise UserError(f"pipeline.balance={bal} has a cell with {min(bal)} layers; every cell needs at least 1")
    return bal


def _section(cfg: Mapping, key: str) -> Mapping:
    sec = cfg.get(key)
    if sec is None:
        return {}
    if not isinstance(sec, Mapping):
        raise UserError(f"{key}={sec!r} is not a config section")
    return sec


def spec_from_config(cfg: Mapping[str, Any], resolve_device: Callable[[str], str] | None = None) -> RunSpec:
    """Validate a plain (resolved) config mapping into a RunSpec. Raises UserError."""
    p = _section(cfg, "pipeline")
    pipe = PipelineSpec(
        K=_int(p, "pipeline", "K", 1, 1), M=_int(p, "pipeline", "M", 1, 1),
        checkpoint=_choice(p, "pipeline", "checkpoint", CHECKPOINTS, "except_last"),
        schedule=_choice(p, "pipeline", "schedule", SCHEDULES, "gpipe"),
        balance=_balance(p.get("balance")),
        balance_by=_choice(p, "pipeline", "balance_by", COSTS, "params"),
        replicas=_int(p, "pipeline", "replicas", 1, 1),
        timeout_s=_float(p, "pipeline", "timeout_s", 1.0, 300.0),
        host_memory=_choice(p, "pipeline", "host_memory", HOST_MEMORY, "retain"),
    )
    if pipe.balance is not None and len(pipe.balance) != pipe.K:
        raise UserError(f"pipeline.balance={pipe.balance} has {len(pipe.balance)} cells but pipeline.K={pipe.K}")
    t = _section(cfg, "train")
    train = TrainSpec(
        batch_size=_int(t, "train", "batch_size", 1, 64), steps=_int(t, "train", "steps", 1, 10),
        warmup_steps=_int(t, "train", "warmup_steps", 0, 2), threads=_int(t, "train", "threads", 1, 1),
        eval=_bool(t, "train", "eval", True), eval_batch_size=_int(t, "train", "eval_batch_size", 1, 256),
        progress=_bool(t, "train", "progress", True), trace_steps=_int(t, "train", "trace_steps", 1, 2),
    )
    if train.warmup_steps >= train.steps:
        raise UserError(f"train.warmup_steps={train.warmup_steps} leaves no timed step; allowed: 0..{train.steps - 1} (train.steps={train.steps})")
    per_replica, rem = divmod(train.batch_size, pipe.replicas)
    if rem:
        raise UserError(f"pipeline.replicas={pipe.replicas} does not divide train.batch_size={train.batch_size}")
    if pipe.M > per_replica:
        raise UserError(f"pipeline.M={pipe.M} exceeds the mini-batch of {per_replica} per replica; allowed: 1..{per_replica}")
    if per_replica % pipe.M:
        raise UserError(f"pipeline.M={pipe.M} does not divide train.batch_size={train.batch_size}"
                        + (f" / {pipe.replicas} replicas" if pipe.replicas > 1 else "")
                        + f"; allowed: a divisor of {per_replica}")
    o = _section(cfg, "optim")
    betas = o.get("betas", (0.9, 0.999))
    optim = OptimSpec(
        name=_choice(o, "optim", "name", OPTIMS, "rmsprop"), lr=_float(o, "optim", "lr", 0.0, 1e-3),
        momentum=_float(o, "optim", "momentum", 0.0, 0.0), weight_decay=_float(o, "optim", "weight_decay", 0.0, 0.0),
        alpha=_float(o, "optim", "alpha", 0.0, 0.9), eps=_float(o, "optim", "eps", 0.0, 1e-8),
        betas=(float(betas[0]), float(betas[1])),
    )
    lg = _section(cfg, "logger")
    logger = LoggerSpec(
        name=_choice(lg, "logger", "name", LOGGERS, "none"), project=str(lg.get("project", "gpipe-repro")),
        mode=_choice(lg, "logger", "mode", WANDB_MODES, "offline"),
        group=None if lg.get("group") is None else str(lg.get("group")),
        name_format=str(lg.get("name_format", "K{K}-M{M}")),
    )
    device = _choice(cfg, "", "device", DEVICES, "auto") if "device" in cfg else "auto"
    if resolve_device is not None:
        device = resolve_device(device)
    m = dict(_section(cfg, "model"))
    d = dict(_section(cfg, "data"))
    if "name" not in m:
        raise UserError("model.name is missing; choose one with model=NAME")
    if "name" not in d:
        raise UserError("data.name is missing; choose one with data=NAME")
    return RunSpec(
        model=str(m.pop("name")), model_params=m, data=str(d.pop("name")), data_params=d,
        pipeline=pipe, train=train, optim=optim, logger=logger,
        seed=_int(cfg, "", "seed", 0, 0) if "seed" in cfg else 0, device=device,
        experiment=cfg.get("experiment_name"),
    )


def _p(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
