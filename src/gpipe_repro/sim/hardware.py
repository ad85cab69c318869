"""Published accelerators as data: peak rates, memory, link, and an efficiency-versus-size curve.

A ``HardwareProfile`` is what the roofline (``sim.roofline``) needs to turn counted FLOPs and bytes
into seconds on a device we do not have. Profiles live as flat YAML files in ``conf/hardware/`` (one
key per field, a header citing the vendor figures) and load with ``load_profile``.

The efficiency curve follows Calculon (see reference/SIMULATION.md): the fraction of peak an
operation reaches grows with its size, given as points (FLOPs of one operation, efficiency) and
interpolated linearly in log(size) between points, clamped outside them; a point at size 0 is joined
to the next point linearly in size (log 0 is undefined). That is what makes small micro-batches cost
more per sample. The curve is stated for the profile's ``precision``; at the other precision an
operation is mapped to the size that takes as long at the curve's peak (size x peak ratio), i.e.
efficiency is taken to depend on the operation's duration at peak.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from .costs import Link

__all__ = ["HardwareProfile", "HardwareError", "PRECISIONS", "PROFILES_DIR", "load_profile"]

PRECISIONS: tuple[str, ...] = ("fp32", "half")
# conf/hardware/ of a source checkout (src/gpipe_repro/sim/hardware.py -> repository root)
PROFILES_DIR = Path(__file__).resolve().parents[3] / "conf" / "hardware"


class HardwareError(ValueError):
    """A hardware profile field is missing, unknown or out of range."""


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator (a TPU core, a GPU) and the link to its pipeline neighbour. SI units."""

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

    def __post_init__(self) -> None:
        for f in ("peak_flops_fp32", "peak_flops_half", "mem_bandwidth_Bps", "link_bandwidth_Bps"):
            _positive(f, getattr(self, f))
        for f in ("link_latency_s", "overhead_s"):
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
        if not isinstance(self.send_occupies_sender, bool):
            raise HardwareError(
                f"hardware.send_occupies_sender={self.send_occupies_sender!r} is invalid; "
                "allowed: true, false"
            )
        pts = self.efficiency_curve
        ok = (
            len(pts) >= 1
            and all(len(p) == 2 and p[0] >= 0 and 0 < p[1] <= 1 for p in pts)
            and all(a[0] < b[0] for a, b in zip(pts, pts[1:]))
        )
        if not ok:
            raise HardwareError(
                f"hardware.efficiency_curve={pts!r} is invalid; allowed: [[op_flops, efficiency], ...] "
                "with op_flops >= 0 strictly increasing and 0 < efficiency <= 1"
            )

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


def _positive(f: str, v: Any) -> None:
    if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
        raise HardwareError(f"hardware.{f}={v!r} is invalid; allowed: a number > 0")


def _coerce(name: str, kind: str, v: Any) -> Any:
    """YAML reads '1e14' as a string and Hydra gives ListConfig: bring values to the field's type
    (``kind`` is the field's annotation as written); ``__post_init__`` then checks the ranges."""
    try:
        if kind == "float":
            return float(v)
        if kind == "int" and not isinstance(v, bool) and float(v).is_integer():
            return int(float(v))
        if name == "efficiency_curve":
            return tuple((float(a), float(b)) for a, b in v)
    except (TypeError, ValueError):
        raise HardwareError(f"hardware.{name}={v!r} is invalid; allowed: a {kind}") from None
    return v


def load_profile(path_or_dict: str | Path | Mapping[str, Any]) -> HardwareProfile:
    """A profile from a YAML file, a profile name in ``conf/hardware/`` (e.g. ``tpu_v3``), or a
    mapping with one key per field (a composed Hydra config group works)."""
    if isinstance(path_or_dict, Mapping):
        data = dict(path_or_dict)
        where = "hardware"
    else:
        path = Path(path_or_dict)
        if not path.is_file() and (PROFILES_DIR / f"{path_or_dict}.yaml").is_file():
            path = PROFILES_DIR / f"{path_or_dict}.yaml"
        if not path.is_file():
            known = (
                sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")) if PROFILES_DIR.is_dir() else []
            )
            raise HardwareError(
                f"hardware={str(path_or_dict)!r} is neither a YAML file nor a known "
                f"profile; allowed: {', '.join(known) or 'a path to a YAML file'}"
            )
        import yaml

        data = yaml.safe_load(path.read_text()) or {}
        where = str(path)
        if not isinstance(data, dict):
            raise HardwareError(
                f"{where} must hold a mapping of profile fields, got {type(data).__name__}"
            )
    spec = {f.name: f for f in fields(HardwareProfile)}
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise HardwareError(
            f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(spec)}"
        )
    missing = [n for n, f in spec.items() if n not in data and f.default is MISSING]
    if missing:
        raise HardwareError(f"{where}: missing field(s) {', '.join(missing)}")
    return HardwareProfile(**{n: _coerce(n, str(spec[n].type), v) for n, v in data.items()})


MEASURED = "measured"  # the hardware option that times layers on the present device (sim.measure)


def hardware_profile(hw: Mapping[str, Any] | None) -> HardwareProfile | None:
    """The composed ``hardware`` config option as a profile; None for ``measured`` (or no option)."""
    data = dict(hw) if hw is not None else {"name": MEASURED}
    if data.get("name") == MEASURED:
        return None
    return load_profile(data)
