"""The hardware validation's typed rows: one published throughput against its simulation, one layer
kind of this CPU's models against its roofline.

Rows: ``AnchorRow`` (``results.csv``), from the anchors' simulations (``sim.anchors``); ``CpuRow``
(``cpu.csv``), from the roofline check's per-layer pairs (``measure.roofline_check``), summed per
model, layer kind and micro-batch. The collect half of ``make validate-hw`` (``reports.status``
counts it); ``profiles`` sums the rows up for the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...measure.roofline_check import RooflineRow
from ...models import MODELS
from ...sim.anchors import AnchorResult, within
from .uses import INPUTS


@dataclass
class AnchorRow:
    """One published end-to-end training throughput against the profile's simulation of it."""

    device: str  # the profile
    model: str
    batch: int  # samples per device and step
    seq: int  # tokens per sample (0: images)
    precision: str
    devices: int  # of the published run
    published: float  # samples per second per device
    simulated: float
    error: float  # simulated / published - 1
    role: str  # fit | check
    within: bool  # |error| <= TOLERANCE
    source: str
    note: str

    @property
    def input(self) -> str:
        return "tokens" if self.seq else "image"

    @property
    def setting(self) -> tuple[str, int, int, str]:
        """What the simulation sees (the published run's device count is not simulated)."""
        return self.model, self.batch, self.seq, self.precision


def anchor_rows(results: Sequence[AnchorResult]) -> list[AnchorRow]:
    rows = []
    for r in results:
        a = r.anchor
        rows.append(
            AnchorRow(
                r.profile,
                a.model,
                a.batch,
                a.seq,
                a.precision,
                a.devices,
                r.published,
                r.predicted,
                r.error,
                a.use,
                within(r.error),
                a.source,
                a.note,
            )
        )
    return rows


@dataclass
class CpuRow:
    """One kind of layer of one model at one micro-batch: forward + backward of every such layer,
    measured on this CPU and by its roofline."""

    model: str
    input: str  # what the model is fed: image | tokens (``uses.INPUTS``)
    kind: str  # the layers' class (a Sequential by its children)
    layers: int
    micro_batch: int
    measured_s: float
    roofline_s: float
    error: float  # roofline / measured - 1
    within: bool


def cpu_rows(pairs: Sequence[RooflineRow]) -> list[CpuRow]:
    """``pairs`` (one per layer, micro-batch and pass) summed per model, layer kind and micro-batch,
    forward + backward (in the order first seen)."""
    groups: dict[tuple[str, str, int], list[RooflineRow]] = {}
    for p in pairs:
        groups.setdefault((p.model, p.name, p.micro_batch), []).append(p)
    rows = []
    for (model, kind, n), ps in groups.items():
        meas, roof = sum(p.measured_s for p in ps), sum(p.roofline_s for p in ps)
        err = roof / meas - 1.0
        fed = INPUTS[MODELS[model].data_kind]
        layers = len({p.layer for p in ps})
        rows.append(CpuRow(model, fed, kind, layers, n, meas, roof, err, within(err)))
    return rows
