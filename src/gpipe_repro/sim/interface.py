"""What a hardware profile offers a run: one interface for a published device and for this device, measured.

The simulator times a run on per-layer costs, a link and a few engine constants (``costs``,
``simulate``). Where those come from is the hardware profile's business: a published device derives
them from counted FLOPs and bytes by a roofline (``hardware.HardwareProfile``), the ``measured``
device times this machine (``measured.MeasuredDevice``). Both offer the same ``Hardware`` interface,
resolved once per run (``hardware.resolve_hardware``), so nothing downstream asks which one it has.

A profile also says how far it can be trusted (``Trust``): a published one is checked against
published end-to-end training throughputs (``anchors``), the measured one against the engine on this
machine (``make validate-sim``). Reports show it beside every number the profile made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from ..engine.microbatch import Batch
from ..options import opt
from .attention import ATTENTION
from .costs import CostModel

__all__ = ["ANCHOR_USES", "PRECISIONS", "Anchor", "HardwareError", "Workload", "Trust", "Hardware"]

PRECISIONS: tuple[str, ...] = ("fp32", "half")
ANCHOR_USES = ("fit", "check")
ANCHOR_REMAT = ("never", "full", "selective")
ANCHOR_PARALLEL = ("allreduce", "ddp", "zero1", "fsdp")  # sim.anchors.parallel.PARALLEL


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
    mem_scale: float = opt(
        1.0, "the published device's memory bandwidth over this profile's (a variant)", min=0
    )
    source: str = opt("", "where it is published (URL)")
    note: str = opt("", "what else the number depends on")
    # how the published run ran (``sim.anchors``: simulated the same way)
    attention: str = opt(
        "materialized",
        "materialized: the L x L scores in memory; fused: one FlashAttention kernel (sim.attention)",
        choices=ATTENTION,
    )
    remat: str = opt(
        "never",
        "never; full: every block's forward again; selective: torchtitan's per-operation policy",
        choices=ANCHOR_REMAT,
    )
    parallel: str = opt(
        "allreduce",
        "with devices > 1: allreduce (after the backward), ddp (overlapping it), zero1, fsdp "
        "(sim.anchors.parallel)",
        choices=ANCHOR_PARALLEL,
    )
    accumulate: int = opt(1, "micro-steps of batch per optimiser step (accumulation)", min=1)


class HardwareError(ValueError):
    """A hardware profile field is missing, unknown or out of range."""


@dataclass(frozen=True)
class Workload:
    """A model as a hardware profile costs it: its layers planned on the meta device and how to feed
    them. ``key`` names the model and its data shapes (profiles and counts are kept per key)."""

    key: str
    layers: Sequence[nn.Module]  # on the meta device
    example: Callable[[int, str], Batch]  # (n, device) -> n model inputs
    targets: Callable[[int], Any]  # n -> the targets of n samples (the real loss needs them)
    loss_fn: Callable[..., torch.Tensor]  # (output, targets) -> mean loss, the engine's
    planning_loss: Callable[[Any], torch.Tensor]  # the same without targets, for counting on meta
    seed: int = 0


@dataclass(frozen=True)
class Trust:
    """How far a profile's predictions were checked: what against, how many points, the worst error."""

    validated: bool  # checked, and every check within its tolerance
    max_error: float | None  # largest |relative error| of the checks (None: not checked here)
    checks: int  # how many end-to-end comparisons
    basis: str  # what it was checked against, in words

    def to_dict(self) -> dict[str, Any]:
        return {
            "validated": self.validated,
            "max_error": self.max_error,
            "checks": self.checks,
            "basis": self.basis,
        }


class Hardware(Protocol):
    """A device a run is simulated on (see the module doc)."""

    @property
    def name(self) -> str: ...

    @property
    def memory_bytes(self) -> int:
        """One device's memory (what a stage's plan must fit)."""
        ...

    @property
    def send_occupies_sender(self) -> bool:
        """Whether a send keeps the sending stage busy for the transfer (``simulate``)."""
        ...

    @property
    def lookahead(self) -> int | None:
        """Actions ahead a receive is posted before its data can move (None: always posted)."""
        ...

    def cost_model(self, workload: Workload, sizes: Sequence[int], M: int) -> CostModel:
        """The costs of ``workload`` at micro-batches ``sizes`` (others interpolated), as a stage
        running ``M`` micro-batches per step incurs them."""
        ...

    def trust(self) -> Trust: ...

    def record(self) -> dict[str, Any]:
        """What ``metrics.json`` says about the hardware (its ``hardware`` object)."""
        ...
