"""Hardware profiles as data: the ``hardware`` config group's schema, published devices, and resolving one.

A profile is one YAML file in ``conf/hardware/`` (``hardware=<file name>``). ``measured`` is this device,
timed (``measured.MeasuredDevice``); every other file describes a published device with the fields of
``HardwareConfig``: peak rates, memory, link, an efficiency-versus-size curve and the published
end-to-end throughputs it is anchored on. To add a device, copy a file, cite the vendor's figures in
its header, and list at least two ``anchors`` (measured training throughputs of known models on it,
``sim.anchors.ANCHOR_MODELS``); ``python -m gpipe_repro.sim.anchors NAME --fit`` fits the curve's
plateau to the anchors marked ``fit`` and reports the error of every anchor; ``make validate-hw``
reports every profile's anchors against the targets (``published_names``: every file but ``measured``).

The roofline (``sim.roofline``) turns counted FLOPs and bytes into seconds on such a device, with
an efficiency-versus-operation-size curve (Calculon's, see reference/SIMULATION.md).

``sim.resolve.resolve_hardware`` turns the composed config into the run's ``Hardware``, once; a
published one is a ``PublishedDevice`` around its ``HardwareProfile`` (``roofline``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..options import opt
from .anchors import trust as anchor_trust
from .costs import CostModel
from .interface import PRECISIONS, Anchor, HardwareError, Trust, Workload
from .roofline import HardwareProfile, RooflineCosts

__all__ = [
    "Anchor",
    "EfficiencyPoint",
    "HardwareConfig",
    "HardwareError",
    "HardwareProfile",
    "MEASURED",
    "PRECISIONS",
    "PROFILES_DIR",
    "PublishedDevice",
    "load_config",
    "load_profile",
    "profile_of",
    "published_names",
]

MEASURED = "measured"  # the profile that times this device (``measured.MeasuredDevice``)
# conf/hardware/ of a source checkout (src/gpipe_repro/sim/hardware.py -> repository root)
PROFILES_DIR = Path(__file__).resolve().parents[3] / "conf" / "hardware"


@dataclass(frozen=True)
class EfficiencyPoint:
    """One point of the efficiency curve."""

    op_flops: float = opt(0.0, "FLOPs of one operation", min=0)
    efficiency: float = opt(1.0, "fraction of peak an operation of that size reaches", min=0, max=1)


@dataclass
class HardwareConfig:
    """The ``hardware`` group's schema: one conf/hardware/*.yaml. ``name: measured`` is this device,
    timed (the other fields unused); any other name is a published device and needs every field. To
    add one: copy a file of conf/hardware/, cite the vendor's figures in its header, list at least
    two ``anchors`` (published training throughputs of models of sim.anchors.ANCHOR_MODELS, each with
    its source, batch, precision and device count), then ``python -m gpipe_repro.sim.anchors NAME
    --fit --write`` fits the efficiency curve's height on the anchors marked ``fit`` and prints every
    anchor's error, and ``make validate-hw`` reports it against the targets (at least 2 anchors, each
    within 20%); a run's metrics.json carries the profile's ``trust`` (validated, worst error)."""

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
    fused_attention_efficiency: float = opt(
        0.0, "fraction of peak a fused attention kernel reaches (0: none here)", min=0, max=1
    )
    devices_per_node: int = opt(0, "devices on the link; beyond, rings cross nodes (0: all)", min=0)
    internode_bandwidth_Bps: float = opt(
        0.0, "one node's inter-node bandwidth per direction, its NICs summed, bytes/s", min=0
    )
    internode_latency_s: float = opt(0.0, "inter-node latency per ring step, s", min=0)

    def check(self) -> None:
        """Raise ``HardwareError`` (one line) unless this is ``measured`` or a valid published device."""
        if self.name != MEASURED:
            profile_of(self)


class PublishedDevice:
    """A published device as the run's ``Hardware``: its roofline costs, its anchors' trust."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def memory_bytes(self) -> int:
        return self.profile.memory_bytes

    @property
    def send_occupies_sender(self) -> bool:
        return self.profile.send_occupies_sender

    @property
    def lookahead(self) -> int | None:
        return None  # DMA engines (nccl, ICI) move data whether or not a receive is posted yet

    def cost_model(self, workload: Workload, sizes: Sequence[int], M: int) -> CostModel:
        """A roofline on the workload's counts (any micro-batch; ``sizes`` and ``M`` not needed)."""
        return RooflineCosts(self.profile, _counts(workload))

    def trust(self) -> Trust:
        """The profile's anchors, simulated (``sim.anchors``; cached on disk)."""
        return anchor_trust(self.profile)

    def record(self) -> dict[str, Any]:
        d = asdict(self.profile)
        d.pop("anchors")
        return {**d, "kind": "published", "trust": self.trust().to_dict()}


def profile_of(cfg: HardwareConfig) -> HardwareProfile:
    """The published device a ``HardwareConfig`` describes (checked: ``HardwareError``)."""
    values: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in fields(HardwareProfile)}
    values["efficiency_curve"] = tuple(
        (float(p.op_flops), float(p.efficiency)) for p in cfg.efficiency_curve
    )
    values["anchors"] = tuple(cfg.anchors)
    return HardwareProfile(**values)


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


def published_names(folder: Path = PROFILES_DIR) -> list[str]:
    """The published profiles of ``folder`` (every YAML file but ``measured``), by file name."""
    return sorted(p.stem for p in folder.glob("*.yaml") if load_config(p).name != MEASURED)


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A published profile from a YAML file or a name in ``conf/hardware/``."""
    cfg = load_config(name_or_path)
    if cfg.name == MEASURED:
        raise HardwareError(
            f"hardware={name_or_path}: {MEASURED} is this device, not a published one"
        )
    return profile_of(cfg)
