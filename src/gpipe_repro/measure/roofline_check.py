"""This CPU's roofline against its measured layers: the one device where a roofline is checked layer by layer.

The roofline (``sim.roofline``) turns counted FLOPs and bytes into seconds with a profile's peak
rate, memory bandwidth and efficiency-versus-operation-size curve. A published profile is checked end
to end on published throughputs (``sim.anchors``); here the same roofline, on a profile of this CPU
calibrated **without looking at the models** — from micro-benchmarks only, one intra-op thread like
the engine's ranks (``sim.measured.cpu.cpu_roofline`` says how each field is measured) — costs every
layer of a model, and the engine's own costs of the same layers are timed
(``sim.measured.profile_layers``), per micro-batch and pass (``compare``). So the error is the
roofline's own (per-operation efficiency of convolutions and attention taken from matmuls,
elementwise work only through bytes), not a fit.

Two experiments ask: ``make validate-sim`` on the validation models it profiled
(``validation_rows``: ``roofline.csv``), and ``make validate-hw`` on three small models of the
registry covering every kind of layer the paper's two models are made of (``measure_cpu``: AmoebaNet-
shaped ``tuplenet``, Transformer-shaped ``tokennet``, plain ``mlp``). ``write_profile`` writes the
profile as a ``conf/hardware/`` file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from ..models import MODELS
from ..sim.count import count_layers
from ..sim.measured import LayerProfile, profile_layers
from ..sim.measured.cpu import cpu_roofline
from ..sim.roofline import HardwareProfile, RooflineCosts
from .models import model

CPU_MODELS = ("tuplenet", "tokennet", "mlp")
CPU_SIZES = (2, 8, 32)


@dataclass
class RooflineRow:
    """One layer of a model at one micro-batch and pass: measured against roofline seconds."""

    model: str
    layer: int
    name: str  # the layer's kind (``kind``)
    micro_batch: int
    pass_: str  # forward | backward
    measured_s: float
    roofline_s: float
    rel_error: float | None  # roofline / measured - 1 (None: nothing measured)


def kind(layer: nn.Module) -> str:
    """A layer's class name; a plain ``Sequential``'s by its children (``Linear+BatchNorm1d+ReLU``)."""
    if type(layer) is nn.Sequential:
        return "+".join(type(c).__name__ for c in layer)
    return type(layer).__name__


def compare(
    name: str,
    profile: LayerProfile,
    meta_layers: list[nn.Module],
    meta_sample: Any,
    planning_loss: Callable[..., Any],
    hw: HardwareProfile,
) -> list[RooflineRow]:
    """Every layer of ``name`` at every micro-batch ``profile`` measured, each pass: the profiled
    seconds against ``hw``'s roofline of the layers counted on the meta device."""
    roof = RooflineCosts(hw, count_layers(meta_layers, meta_sample, planning_loss))
    rows = []
    for n in profile.sizes:
        for i, (m, r) in enumerate(zip(profile.costs[n], roof.layer_costs(n))):
            for p, meas, est in (
                ("forward", m.forward_s, r.forward_s),
                ("backward", m.backward_s, r.backward_s),
            ):
                rel = est / meas - 1 if meas > 0 else None
                rows.append(RooflineRow(name, i, kind(meta_layers[i]), n, p, meas, est, rel))
    return rows


def validation_rows(profiles: dict[str, LayerProfile], hw: HardwareProfile) -> list[RooflineRow]:
    """The validation models' profiled layers against ``hw``'s roofline (``make validate-sim``)."""
    rows = []
    for name, prof in profiles.items():
        vm = model(name)
        x = vm.sample(1)[0]
        meta = x.to("meta") if torch.is_tensor(x) else tuple(t.to("meta") for t in x)
        rows += compare(name, prof, vm.meta_layers(), meta, vm.planning_loss, hw)
    return rows


def measure_cpu(
    models: tuple[str, ...] = CPU_MODELS, sizes: tuple[int, ...] = CPU_SIZES, repeats: int = 5
) -> tuple[HardwareProfile, list[RooflineRow]]:
    """This CPU's roofline profile and every layer of the registry's ``models`` at every micro-batch
    of ``sizes``, timed afresh (never from the cache) and costed by that roofline (one intra-op
    thread; ``make validate-hw``)."""
    from ..data import DATASETS

    torch.set_num_threads(1)
    hw = cpu_roofline()
    rows: list[RooflineRow] = []
    for name in models:
        spec = MODELS[name]
        data = DATASETS["synthetic"].config()
        data.kind = spec.data_kind
        info = data.info()
        with torch.device("meta"):
            meta = spec.layers(info, spec.config())
        real = spec.layers(info, spec.config())

        def sample(n: int, info: Any = info) -> tuple[Any, torch.Tensor]:
            shape = info.shape if info.kind != "image" else ()
            return info.example(n, "cpu"), torch.zeros(n, *shape, dtype=torch.long)

        prof = profile_layers(
            real, sample, list(sizes), loss_fn=spec.loss_fn, repeats=repeats, use_cache=False
        )
        rows += compare(name, prof, meta, info.example(2, "meta"), spec.planning_loss, hw)
    return hw, rows


def write_profile(hw: HardwareProfile, path: Path, header: str) -> None:
    """``hw`` as a ``conf/hardware/*.yaml`` file (``sim.hardware.load_profile`` reads it back),
    ``header`` its opening comment."""
    d = {k: v for k, v in asdict(hw).items() if k != "anchors"}
    d["efficiency_curve"] = [{"op_flops": s, "efficiency": e} for s, e in hw.efficiency_curve]
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(comment + yaml.safe_dump(d, sort_keys=False))
