"""The hardware validation's typed rows and what they sum up to: per anchor, per device, per layer kind.

Rows: ``AnchorRow`` (one published throughput against its simulation, ``results.csv``), ``CpuRow``
(one kind of layer of one model at one micro-batch, this CPU's roofline against the measured costs,
``cpu.csv``). Summary, computed from the rows alone: ``DeviceSummary`` (the targets per device: at
least ``MIN_ANCHORS`` anchors, each within ``TOLERANCE``), ``KindSummary`` (the roofline per layer
kind on this CPU), and ``rests_on`` — for every experiment simulated on a profile (``uses``), whether
that profile's anchors vouch for it, and the line that says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ...measure.roofline_check import RooflineRow
from ...models import MODELS
from ...sim.anchors import MIN_ANCHORS, TOLERANCE, AnchorResult, validated, within
from ..template import words
from .uses import INPUTS, UseRow

__all__ = [
    "problems",
    "AnchorRow",
    "CpuRow",
    "DeviceSummary",
    "KindSummary",
    "anchor_rows",
    "cpu_rows",
    "devices",
    "kinds",
    "rests_on",
]


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
class DeviceSummary:
    """A device's anchors against the targets: at least ``MIN_ANCHORS``, each within ``TOLERANCE``
    (``devices.csv``: a profile with no anchor has a row too)."""

    device: str
    anchors: int
    within: int
    checks: int  # anchors the curve was not fitted on
    checks_within: int
    checks_new: int  # checks at a setting (model, batch, seq, precision) no fit anchor has
    worst: float | None  # the signed error of largest magnitude
    inputs: str  # what the anchored models are fed: image, tokens or image+tokens

    @property
    def enough(self) -> bool:
        return self.anchors >= MIN_ANCHORS

    @property
    def each(self) -> bool:
        return self.anchors > 0 and self.within == self.anchors

    @property
    def met(self) -> bool:
        return validated(self.anchors, self.within)

    def line(self) -> str:
        """The targets, met or not, in one line (``templates/hw_lines.md.j2``)."""
        return words("hw_lines", "device", d=self, least=MIN_ANCHORS, tol=TOLERANCE)


def devices(rows: Sequence[AnchorRow], names: Sequence[str] = ()) -> list[DeviceSummary]:
    """One summary per device of ``rows`` (and of ``names``, which may have no anchor), by name."""
    out = []
    for d in sorted({r.device for r in rows} | set(names)):
        rs = [r for r in rows if r.device == d]
        checks = [r for r in rs if r.role == "check"]
        fitted = {r.setting for r in rs if r.role == "fit"}
        out.append(
            DeviceSummary(
                d,
                len(rs),
                sum(r.within for r in rs),
                len(checks),
                sum(r.within for r in checks),
                sum(r.setting not in fitted for r in checks),
                max((r.error for r in rs), key=abs, default=None),
                "+".join(sorted({r.input for r in rs})),
            )
        )
    return out


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


@dataclass(frozen=True)
class KindSummary:
    """One layer kind of one model over every micro-batch measured."""

    model: str
    input: str
    kind: str
    errors: tuple[tuple[int, float], ...]  # (micro-batch, signed error)

    @property
    def median(self) -> float:
        return statistics.median(e for _, e in self.errors)

    @property
    def within(self) -> bool:
        return all(within(e) for _, e in self.errors)


def kinds(rows: Sequence[CpuRow]) -> list[KindSummary]:
    out: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in rows:
        out.setdefault((r.model, r.input, r.kind), []).append((r.micro_batch, r.error))
    return [KindSummary(m, i, k, tuple(sorted(es))) for (m, i, k), es in out.items()]


def problems(
    s: DeviceSummary | None, hardware: str, fed: str, cpu: Sequence[KindSummary]
) -> list[str]:
    """Why cells of a model fed ``fed`` simulated on ``hardware`` (its summary ``s``; None: no
    anchor) rest on a roofline not anchored well enough, one line per reason
    (``templates/hw_lines.md.j2``); empty where it is anchored. End to end: the profile's targets met
    and one of its anchors fed the same input (images or tokens); per layer (what a time-balanced
    partition is cut on): every layer kind of this CPU's models fed that input within ``TOLERANCE``
    (``cpu``; not judged when empty)."""
    ks = [k for k in cpu if k.input == fed]
    bad = [k for k in ks if not k.within]
    worst, at = max(((e, k) for k in bad for _, e in k.errors), key=lambda p: abs(p[0]),
                    default=(None, None))  # fmt: skip
    median = statistics.median(e for k in ks for _, e in k.errors) if bad else None
    return words("hw_lines", "problems", s=s, hardware=hardware, fed=fed, tol=TOLERANCE, kinds=ks,
                 bad=bad, worst=worst, at=at, median=median).splitlines()  # fmt: skip


def rests_on(
    summaries: Sequence[DeviceSummary], used: Sequence[UseRow], cpu: Sequence[KindSummary]
) -> list[tuple[bool, str]]:
    """Per experiment simulated on a published profile: whether its roofline is anchored well
    enough for it (``problems``), and the line that says so. Then one line per profile whose
    targets are not met and that no experiment uses."""
    by_name = {s.device: s for s in summaries}
    out = []
    for u in used:
        s, ks = by_name.get(u.hardware), [k for k in cpu if k.input == u.input]
        why = problems(s, u.hardware, u.input, cpu)
        out.append((not why, words("hw_lines", "use", u=u, s=s, why=why, kinds=ks, tol=TOLERANCE)))
    idle = [s for s in summaries if not s.met and s.device not in {u.hardware for u in used}]
    return out + [(False, words("hw_lines", "idle", s=s)) for s in idle]
