"""A ``cpu`` hardware profile for this machine, and its roofline checked against measured layer costs.

The roofline (``sim.roofline``) turns counted FLOPs and bytes into seconds with a profile's peak rate,
memory bandwidth and efficiency-versus-operation-size curve. To see how far that model is from a real
device, the same validation models' layers are costed both ways on this CPU: measured
(``profile.profile_layers``) and by the roofline of a ``cpu`` profile calibrated here **without looking
at the models** — from micro-benchmarks only, one intra-op thread like the engine's ranks:

- ``peak_flops_fp32``: the best rate of square fp32 matmuls of 16 .. 1024 (1 thread);
- ``efficiency_curve``: each of those matmuls' rate over the peak, against its FLOPs (Calculon's
  per-operation curve), made non-decreasing in size;
- ``mem_bandwidth_Bps``: a 64 MiB tensor copy (bytes read + written per second);
- the link and the engine overhead: this device's calibration (``device.device_model``);
- ``memory_bytes``: the host's physical memory.

So the error reported is the roofline's own (per-operation efficiency of convolutions and attention
taken from matmuls, elementwise work only through bytes), not a fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...sim.count import classification_loss, count_layers, lm_loss
from ...sim.device import DeviceModel, host_memory_bytes
from ...sim.hardware import HardwareProfile
from ...sim.measure import LayerProfile
from ...sim.roofline import RooflineCosts
from .models import MODELS

__all__ = ["calibrate_cpu", "profile_yaml", "roofline_rows", "RooflineRow"]

MATMUL_SIZES = (16, 32, 64, 128, 256, 512, 1024)


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


def _best(fn: Any, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _matmul_rates(repeats: int = 7) -> list[tuple[float, float]]:
    """(FLOPs of one matmul, FLOP/s) for square fp32 matmuls (the best of ``repeats``)."""
    out = []
    for n in MATMUL_SIZES:
        a, b = torch.randn(n, n), torch.randn(n, n)
        inner = max(1, int(2e7 // (2 * n**3)))  # small matmuls: time a batch of calls

        def run(a: torch.Tensor = a, b: torch.Tensor = b, inner: int = inner) -> None:
            for _ in range(inner):
                torch.mm(a, b)

        t = _best(run, repeats) / inner
        out.append((2.0 * n**3, 2.0 * n**3 / t))
    return out


def _copy_bandwidth(repeats: int = 5) -> float:
    src = torch.randn(16 * 2**20)  # 64 MiB
    dst = torch.empty_like(src)
    t = _best(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() * src.element_size() / t


def calibrate_cpu(dm: DeviceModel) -> HardwareProfile:
    """This CPU as a roofline profile (see the module docstring for how each field is measured)."""
    torch.set_num_threads(1)
    rates = _matmul_rates()
    peak = max(r for _, r in rates)
    curve, best = [], 0.0
    for flops, r in rates:
        best = max(best, r / peak)
        curve.append((flops, min(1.0, best)))
    return HardwareProfile(
        name="cpu",
        peak_flops_fp32=peak,
        peak_flops_half=peak,
        precision="fp32",
        mem_bandwidth_Bps=_copy_bandwidth(),
        memory_bytes=host_memory_bytes(),
        link_latency_s=dm.link.latency_s,
        link_bandwidth_Bps=dm.link.bandwidth_Bps,
        link_hops=1,
        efficiency_curve=tuple(curve),
        overhead_s=dm.overhead_s,
        send_occupies_sender=dm.sender_busy,
    )


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
        loss = lm_loss if name == "transformer" else classification_loss
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
