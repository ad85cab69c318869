"""This device, calibrated once: the ``measured`` hardware profile's link and engine overheads.

Per-layer costs depend on the model and are profiled per model (``distinct``, ``profile``). What does
not depend on the model is measured once per device and cached (``cache``):

- the link: latency and bandwidth of a real point-to-point transfer over the engine's backend
  (``link.measure_link``: gloo on CPU, nccl on CUDA);
- the engine's own cost per micro-batch action (``overhead_s``) and per step (``step_overhead_s``):
  real K = 1 steps of a small reference model at several M, minus its profiled layer costs, fitted
  by a line in the number of actions (``measure.measure_overhead``, SIMULATION.md item 4). The
  reference is small (a few narrow linear layers) so that the residual is the engine's bookkeeping
  (splitting, event spans, autograd entry, the loss sum, the BatchNorm commit) rather than noise in
  large layer times;
- what posting a send and a receive costs the calling thread (``Link.send_call_s``, ``recv_call_s``):
  gloo's ``isend`` returns once posted and moves the data on its own threads, after the receiver has
  posted its receive (the engine posts 4 actions ahead); nccl runs on a side stream. So a send does not
  occupy its sender (``sender_busy=False``) on either backend.

``measured_costs`` joins a model's profile with these into the ``CostModel`` the simulator takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import cache
from .costs import Link
from .distinct import ExampleFn, TargetFn, profile_planned
from .measure import MeasuredCosts, measure_link, measure_overhead, profile_layers
from .profile import LossFn

__all__ = ["DeviceModel", "device_model", "measured_costs", "REFERENCE"]


@dataclass(frozen=True)
class _Reference:
    width: int = 64
    depth: int = 4
    N: int = 64
    Ms: tuple[int, ...] = (1, 2, 4, 8, 16)
    repeats: int = 5


REFERENCE = _Reference()


@dataclass(frozen=True)
class DeviceModel:
    """The model-independent part of the ``measured`` profile."""

    device: str  # the device's name (CPU model or CUDA device)
    link: Link
    overhead_s: float  # the engine's cost per forward or backward action of a micro-batch
    step_overhead_s: float  # the engine's cost per step and stage
    sender_busy: bool  # a send occupies the sending rank for its whole transfer (no: gloo, nccl)
    source: str = "measured"  # measured | cache

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["link"] = asdict(self.link)
        d.pop("source")
        return d


def _reference_layers() -> list[nn.Module]:
    torch.manual_seed(0)
    w, d = REFERENCE.width, REFERENCE.depth
    layers: list[nn.Module] = [nn.Sequential(nn.Linear(w, w), nn.ReLU()) for _ in range(d)]
    return [*layers, nn.Linear(w, 10)]


def _reference_sample(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, REFERENCE.width, generator=g), torch.randint(0, 10, (n,), generator=g)


def _reference_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def device_model(device: str = "cpu", *, use_cache: bool = True) -> DeviceModel:
    """The calibrated link and engine overheads of this device (measured once, then cached)."""
    dev = torch.device(device)
    key = {
        "device": cache.device_name(dev),
        "device_type": dev.type,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "reference": asdict(REFERENCE),
        "format": 2,  # 2: the link holds the send/receive call costs
    }
    if use_cache and (stored := cache.load("device", key)) is not None:
        try:
            return DeviceModel(
                stored["device"],
                Link(**stored["link"]),
                float(stored["overhead_s"]),
                float(stored["step_overhead_s"]),
                bool(stored["sender_busy"]),
                "cache",
            )
        except (KeyError, TypeError, ValueError):
            pass
    link = measure_link(device=dev.type, use_cache=use_cache).link
    layers = _reference_layers()
    N, Ms = REFERENCE.N, REFERENCE.Ms
    prof = profile_layers(
        layers,
        _reference_sample,
        [N // m for m in Ms],
        device=dev,
        loss_fn=_reference_loss,
        repeats=REFERENCE.repeats,
        use_cache=use_cache,
    )
    fit = measure_overhead(
        layers,
        _reference_sample,
        N,
        Ms,
        loss_fn=_reference_loss,
        device=dev,
        repeats=REFERENCE.repeats,
        profile=prof,
    )
    model = DeviceModel(cache.device_name(dev), link, fit.overhead_s, max(0.0, fit.fixed_s), False)
    if use_cache:
        cache.save("device", key, model.to_json())
    return model


def measured_costs(
    layers: Sequence[nn.Module],
    example: ExampleFn,
    targets: TargetFn,
    sizes: Sequence[int],
    *,
    loss_fn: LossFn | None,
    seed: int = 0,
    repeats: int = 5,
    extrapolate: str = "linear",
    device: DeviceModel | None = None,
    use_cache: bool = True,
    log: Callable[[str], None] | None = None,
    on: str = "cpu",
) -> tuple[MeasuredCosts, DeviceModel]:
    """The ``measured`` cost model of a model planned on ``meta``: its distinct layers profiled at
    ``sizes`` (``distinct.profile_planned``) and this device's link and overheads."""
    dm = device or device_model(on, use_cache=use_cache)
    prof = profile_planned(
        layers,
        example,
        targets,
        sizes,
        loss_fn=loss_fn,
        seed=seed,
        repeats=repeats,
        use_cache=use_cache,
        log=log,
        device=on,
    )
    costs = MeasuredCosts(prof, dm.link, dm.overhead_s, extrapolate, dm.step_overhead_s)
    return costs, dm


def host_memory_bytes() -> int:
    """Physical memory of this machine (what ``hardware=measured`` on a CPU calls device memory)."""
    import os

    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
