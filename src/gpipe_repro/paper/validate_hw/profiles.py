"""What the hardware validation's rows sum up to: per device, per layer kind, per use of a profile.

From the rows alone (``hw_rows.py``): ``DeviceSummary`` (the targets per device: at least
``MIN_ANCHORS`` anchors, each within ``TOLERANCE``), ``KindSummary`` (the roofline per layer kind on
this CPU), and ``rests_on`` — for every experiment simulated on a profile (``uses``), whether that
profile's anchors vouch for it, and the line that says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ...sim.anchors import MIN_ANCHORS, TOLERANCE, validated, within
from ..template import words
from .hw_rows import AnchorRow, CpuRow
from .uses import UseRow

__all__ = ["problems", "DeviceSummary", "KindSummary", "devices", "kinds", "rests_on"]


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


@dataclass(frozen=True)
class KindSummary:
    """One layer kind of one model over every micro-batch measured."""

    model: str
    input: str
    kind: str
    errors: tuple[tuple[int, float], ...]  # (micro-batch, signed error)

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
