"""This machine's ``cpu`` hardware profile as a file, and its roofline checked against measured layer costs.

The roofline (``sim.roofline``) turns counted FLOPs and bytes into seconds with a profile's peak rate,
memory bandwidth and efficiency-versus-operation-size curve. To see how far that model is from a real
device, the same validation models' layers are costed both ways on this CPU: measured
(``sim.measured.profile_layers``) and by the roofline of the ``cpu`` profile calibrated **without
looking at the models** — from micro-benchmarks only, one intra-op thread like the engine's ranks
(``sim.measured.cpu.cpu_roofline`` says how each field is measured).

So the error reported is the roofline's own (per-operation efficiency of convolutions and attention
taken from matmuls, elementwise work only through bytes), not a fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..models import class_planning_loss, token_planning_loss
from ..sim.count import count_layers
from ..sim.measured import LayerProfile
from ..sim.roofline import HardwareProfile, RooflineCosts
from .models import MODELS

__all__ = ["profile_yaml", "roofline_rows", "write_profile", "RooflineRow"]


@dataclass
class RooflineRow:
    """One layer, micro-batch and pass of a validation model: measured against roofline seconds."""

    model: str
    layer: int
    name: str
    micro_batch: int
    pass_: str
    measured_s: float
    roofline_s: float
    rel_error: float | None


def profile_yaml(hw: HardwareProfile, header: str) -> str:
    """The profile as a ``conf/hardware/*.yaml`` file (``load_profile`` reads it back)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, v in [
        ("name", hw.name),
        ("peak_flops_fp32", hw.peak_flops_fp32),
        ("peak_flops_half", hw.peak_flops_half),
        ("precision", hw.precision),
        ("mem_bandwidth_Bps", hw.mem_bandwidth_Bps),
        ("memory_bytes", hw.memory_bytes),
        ("link_latency_s", hw.link_latency_s),
        ("link_bandwidth_Bps", hw.link_bandwidth_Bps),
        ("link_hops", hw.link_hops),
        (
            "efficiency_curve",
            "[" + ", ".join(f"[{a:.4g}, {b:.4f}]" for a, b in hw.efficiency_curve) + "]",
        ),
        ("overhead_s", hw.overhead_s),
        ("op_min_s", hw.op_min_s),
        ("send_occupies_sender", str(hw.send_occupies_sender).lower()),
    ]:
        if isinstance(v, float):
            v = f"{v:.6g}"
        lines.append(f"{name}: {v}")
    return "\n".join(lines) + "\n"


def roofline_rows(profiles: dict[str, LayerProfile], hw: HardwareProfile) -> list[RooflineRow]:
    """Per model, layer, measured micro-batch and pass: measured and roofline seconds."""
    rows = []
    for name, prof in profiles.items():
        vm = MODELS[name]
        layers = vm.meta_layers()
        sample = vm.sample(1)[0]
        meta = sample.to("meta") if torch.is_tensor(sample) else tuple(t.to("meta") for t in sample)
        loss = token_planning_loss if name == "transformer" else class_planning_loss
        roof = RooflineCosts(hw, count_layers(layers, meta, loss))
        for n in prof.sizes:
            for i, (meas, est) in enumerate(zip(prof.costs[n], roof.layer_costs(n))):
                for p, m, e in (
                    ("forward", meas.forward_s, est.forward_s),
                    ("backward", meas.backward_s, est.backward_s),
                ):
                    rel = (e - m) / m if m > 0 else None
                    rows.append(RooflineRow(name, i, type(layers[i]).__name__, n, p, m, e, rel))
    return rows


def write_profile(hw: HardwareProfile, path: Path, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_yaml(hw, how))
