"""Hardware profiles as data: the ``hardware`` config group's schema, published devices, and resolving one.

A profile is one YAML file in ``conf/hardware/`` (``hardware=<file name>``). ``measured`` is this device,
timed (``measured.MeasuredDevice``); every other file describes a published device with the fields of
``HardwareConfig``: peak rates, memory, link, an efficiency-versus-size curve and the published
end-to-end throughputs it is anchored on. To add a device, copy a file, cite the vendor's figures in
its header, and list at least two ``anchors`` (measured training throughputs of known models on it,
``sim.anchors.ANCHOR_MODELS``); ``python -m gpipe_repro.sim.anchors NAME --fit`` fits the curve's
plateau to the anchors marked ``fit`` and reports the error of every anchor.

The roofline (``sim.roofline``) turns counted FLOPs and bytes into seconds on such a device. Its
efficiency curve follows Calculon (see reference/SIMULATION.md): the fraction of peak an operation
reaches grows with its size, given as points (FLOPs of one operation, efficiency) and interpolated
linearly in log(size) between points, clamped outside them; a point at size 0 is joined to the next
point linearly in size (log 0 is undefined). The curve is stated for the profile's ``precision``; at
the other precision an operation is mapped to the size that takes as long at the curve's peak (size x
peak ratio), i.e. efficiency is taken to depend on the operation's duration at peak.

``resolve_hardware`` turns the composed config into the run's ``Hardware`` (``interface``), once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..options import opt
from .costs import CostModel, Link
from .interface import Hardware, HardwareError, Trust, Workload

__all__ = [
    "Anchor",
    "EfficiencyPoint",
    "HardwareConfig",
    "HardwareError",
    "HardwareProfile",
    "MEASURED",
    "PRECISIONS",
    "PROFILES_DIR",
    "load_config",
    "load_profile",
    "resolve_hardware",
]

PRECISIONS: tuple[str, ...] = ("fp32", "half")
MEASURED = "measured"  # the profile that times this device (``measured.MeasuredDevice``)
# conf/hardware/ of a source checkout (src/gpipe_repro/sim/hardware.py -> repository root)
PROFILES_DIR = Path(__file__).resolve().parents[3] / "conf" / "hardware"
ANCHOR_USES = ("fit", "check")


@dataclass(frozen=True)
class EfficiencyPoint:
    """One point of the efficiency curve."""

    op_flops: float = opt(0.0, "FLOPs of one operation", min=0)
    efficiency: float = opt(1.0, "fraction of peak an operation of that size reaches", min=0, max=1)


@dataclass(frozen=True)
class Anchor:
    """A published end-to-end training throughput of a known model on the device."""

    model: str = opt("", "the model: a name of sim.anchors.ANCHOR_MODELS")
    batch: int = opt(1, "samples per device and step", min=1)
    seq: int = opt(0, "tokens per sample (0: images)", min=0)
    precision: str = opt("fp32", "the run's precision", choices=PRECISIONS)
    devices: int = opt(1, "devices of the published run (throughput is per device / this)", min=1)
    throughput: float = opt(0.0, "samples per second over all its devices", min=0)
    use: str = opt(
        "check", "fit: the curve is fitted on it; check: compared only", choices=ANCHOR_USES
    )
    peak_scale: float = opt(
        1.0, "the published device's peak over this profile's (a variant)", min=0
    )
    source: str = opt("", "where it is published (URL)")
    note: str = opt("", "what else the number depends on")


@dataclass
class HardwareConfig:
    """The ``hardware`` group's schema: one conf/hardware/*.yaml. ``name: measured`` is this device,
    timed (the other fields unused); any other name is a published device and needs every field. To
    add one: copy a file of conf/hardware/, cite the vendor's figures in its header, list at least
    two ``anchors`` (published training throughputs of models of sim.anchors.ANCHOR_MODELS, each with
    its source, batch, precision and device count), then ``python -m gpipe_repro.sim.anchors NAME
    --fit --write`` fits the efficiency curve's height on the anchors marked ``fit`` and prints every
    anchor's error; a run's metrics.json carries the profile's ``trust`` (validated, worst error)."""

    name: str = opt(MEASURED, "the profile's name; measured = this device, timed")
    peak_flops_fp32: float = opt(0.0, "peak FLOP/s in fp32", min=0)
    peak_flops_half: float = opt(0.0, "peak FLOP/s in bf16/fp16, dense", min=0)
    precision: str = opt("fp32", "the precision the roofline computes in", choices=PRECISIONS)
    mem_bandwidth_Bps: float = opt(0.0, "device memory bandwidth, bytes/s", min=0)
    mem_efficiency: float = opt(
        1.0, "fraction of that bandwidth an operation reaches", min=0, max=1
    )
    memory_bytes: int = opt(0, "device memory capacity, bytes", min=0)
    link_latency_s: float = opt(0.0, "pipeline link latency per hop, s", min=0)
    link_bandwidth_Bps: float = opt(
        0.0, "pipeline link bandwidth per hop and direction, bytes/s", min=0
    )
    link_hops: int = opt(1, "hops between neighbouring devices (2: device-host-device)", min=1)
    efficiency_curve: list[EfficiencyPoint] = opt(
        [], "points {op_flops, efficiency}: the fraction of peak an operation of that size reaches"
    )
    overhead_s: float = opt(0.0, "fixed cost per pipeline action (launch, bookkeeping), s", min=0)
    op_min_s: float = opt(0.0, "shortest operation (launching one kernel), s", min=0)
    send_occupies_sender: bool = opt(False, "a send keeps its stage busy (no DMA engine)")
    anchors: list[Anchor] = opt([], "published end-to-end throughputs the curve is checked on")

    def check(self) -> None:
        """Raise ``HardwareError`` (one line) unless this is ``measured`` or a valid published device."""
        if self.name != MEASURED:
            HardwareProfile.from_config(self)


@dataclass(frozen=True)
class HardwareProfile:
    """One published accelerator (a TPU core, a GPU) and the link to its pipeline neighbour. SI units."""

    name: str
    peak_flops_fp32: float  # FLOP/s
    peak_flops_half: float  # FLOP/s, bf16 or fp16 (dense, no sparsity)
    precision: str  # "fp32" | "half": the precision the roofline uses unless told otherwise
    mem_bandwidth_Bps: float  # device memory bandwidth, bytes/s
    memory_bytes: int  # device memory capacity
    link_latency_s: float  # per hop
    link_bandwidth_Bps: float  # per hop, one direction
    link_hops: int  # 2: device -> host -> device without a direct path (Table 3's P100s)
    efficiency_curve: tuple[tuple[float, float], ...]  # (FLOPs of one op, fraction of peak)
    overhead_s: float  # fixed cost per pipeline action (launch, bookkeeping)
    send_occupies_sender: bool = False  # True for gloo on CPU; DMA engines (nccl, ICI) overlap
    op_min_s: float = 0.0  # shortest operation: launching one kernel
    mem_efficiency: float = 1.0  # fraction of the memory bandwidth an operation reaches
    anchors: tuple[Anchor, ...] = ()

    def __post_init__(self) -> None:
        for f in ("peak_flops_fp32", "peak_flops_half", "mem_bandwidth_Bps", "link_bandwidth_Bps"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise HardwareError(f"hardware.{f}={v!r} is invalid; allowed: a number > 0")
        if not 0 < self.mem_efficiency <= 1:
            raise HardwareError(
                f"hardware.mem_efficiency={self.mem_efficiency!r} is invalid; allowed: 0 < x <= 1"
            )
        for f in ("link_latency_s", "overhead_s", "op_min_s"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise HardwareError(f"hardware.{f}={v!r} is invalid; allowed: a number >= 0")
        if self.precision not in PRECISIONS:
            raise HardwareError(
                f"hardware.precision={self.precision!r} is unknown; allowed: {', '.join(PRECISIONS)}"
            )
        if not (isinstance(self.link_hops, int) and self.link_hops >= 1):
            raise HardwareError(
                f"hardware.link_hops={self.link_hops!r} is invalid; allowed: an integer >= 1"
            )
        if not (isinstance(self.memory_bytes, int) and self.memory_bytes > 0):
            raise HardwareError(
                f"hardware.memory_bytes={self.memory_bytes!r} is invalid; allowed: an integer > 0"
            )
        pts = self.efficiency_curve
        ok = (
            len(pts) >= 1
            and all(len(p) == 2 and p[0] >= 0 and 0 < p[1] <= 1 for p in pts)
            and all(a[0] < b[0] for a, b in zip(pts, pts[1:]))
        )
        if not ok:
            raise HardwareError(
                f"hardware.efficiency_curve={pts!r} is invalid; allowed: [{{op_flops, efficiency}}, "
                "...] with op_flops >= 0 strictly increasing and 0 < efficiency <= 1"
            )
        for i, a in enumerate(self.anchors):
            if not (a.model and a.throughput > 0 and a.source):
                raise HardwareError(
                    f"hardware.anchors[{i}]={a.model or '?'}: model, throughput > 0 and source are "
                    "required"
                )

    @classmethod
    def from_config(cls, cfg: HardwareConfig) -> HardwareProfile:
        """The published device a ``HardwareConfig`` describes (checked)."""
        values: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in fields(cls)}
        values["efficiency_curve"] = tuple(
            (float(p.op_flops), float(p.efficiency)) for p in cfg.efficiency_curve
        )
        values["anchors"] = tuple(cfg.anchors)
        return cls(**values)

    # ------------------------------------------------------------------ the roofline's numbers
    def peak(self, precision: str | None = None) -> float:
        p = precision or self.precision
        if p not in PRECISIONS:
            raise HardwareError(f"precision={p!r} is unknown; allowed: {', '.join(PRECISIONS)}")
        return self.peak_flops_fp32 if p == "fp32" else self.peak_flops_half

    def efficiency(self, op_flops: float, precision: str | None = None) -> float:
        """Fraction of peak reached by one operation of ``op_flops`` FLOPs (Calculon's curve)."""
        size = op_flops * self.peak(self.precision) / self.peak(precision)
        pts = self.efficiency_curve
        if size <= pts[0][0]:
            return pts[0][1]
        for (s0, e0), (s1, e1) in zip(pts, pts[1:]):
            if size < s1:
                t = size / s1 if s0 == 0 else math.log(size / s0) / math.log(s1 / s0)
                return e0 + t * (e1 - e0)
        return pts[-1][1]

    def op_time(self, op_flops: float, precision: str | None = None) -> float:
        """Seconds one operation of ``op_flops`` FLOPs takes at its efficiency."""
        if op_flops <= 0:
            return 0.0
        return op_flops / (self.peak(precision) * self.efficiency(op_flops, precision))

    @property
    def link(self) -> Link:
        return Link(self.link_latency_s, self.link_bandwidth_Bps, self.link_hops)

    # ------------------------------------------------------------------ the Hardware interface
    @property
    def lookahead(self) -> int | None:
        return None  # DMA engines (nccl, ICI) move data whether or not a receive is posted yet

    def cost_model(self, workload: Workload, sizes: Sequence[int], M: int) -> CostModel:
        """A roofline on the workload's counts (any micro-batch; ``sizes`` and ``M`` not needed)."""
        from .roofline import RooflineCosts

        return RooflineCosts(self, _counts(workload))

    def trust(self) -> Trust:
        """The profile's anchors, simulated (``sim.anchors``; cached on disk)."""
        from .anchors import trust

        return trust(self)

    def record(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("anchors")
        return {**d, "kind": "published", "trust": self.trust().to_dict()}


_COUNTS: dict[str, list[Any]] = {}


def _counts(w: Workload) -> list[Any]:
    """Per-layer counts at two samples (they scale exactly), once per model in this process: a sweep
    over K and M counts the model once. Two: BatchNorm refuses one sample per channel in training."""
    from .count import count_layers

    if w.key not in _COUNTS:
        _COUNTS[w.key] = count_layers(w.layers, w.example(2, "meta"), w.planning_loss)
    return _COUNTS[w.key]


def load_config(name_or_path: str | Path) -> HardwareConfig:
    """A profile's config from a YAML file or a profile name in ``conf/hardware/`` (e.g. ``tpu_v3``),
    typed by the schema (unknown keys and wrong types refused in one line)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(name_or_path)
    if not path.is_file() and (PROFILES_DIR / f"{name_or_path}.yaml").is_file():
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")) if PROFILES_DIR.is_dir() else []
        raise HardwareError(
            f"hardware={str(name_or_path)!r} is neither a YAML file nor a known profile; allowed: "
            f"{', '.join(known) or 'a path to a YAML file'}"
        )
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(HardwareConfig), OmegaConf.load(path))
        out = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        where = f"{path}: hardware.{key}" if key else str(path)
        raise HardwareError(f"{where}: {str(err).splitlines()[0]}") from None
    assert isinstance(out, HardwareConfig)
    return out


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A published profile from a YAML file or a name in ``conf/hardware/``."""
    cfg = load_config(name_or_path)
    if cfg.name == MEASURED:
        raise HardwareError(
            f"hardware={name_or_path}: {MEASURED} is this device, not a published one"
        )
    return HardwareProfile.from_config(cfg)


def resolve_hardware(cfg: HardwareConfig, device: str = "cpu", repeats: int = 5) -> Hardware:
    """The run's hardware: ``measured`` times this device (``device``: cpu or cuda; ``repeats`` per
    profiled layer), any other config is the published device it describes."""
    if cfg.name == MEASURED:
        from .measured import MeasuredDevice

        return MeasuredDevice(device, repeats)
    return HardwareProfile.from_config(cfg)
