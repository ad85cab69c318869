"""The four verdicts a claim of the paper can get, and the rules that give them — stated once, here.

A claim (``paper.claims``) is judged from a report's rows by one of these rules, never by hand (the
scorecard's page, ``templates/scorecard.md.j2``, words each in one line):

- **seeded** (a claim about an effect over seeds): each comparison by ``paper.stats`` (Welch's t,
  the effect the seeds could detect, a verdict in words); ``seeded`` turns them into one verdict:
  every comparison beyond the noise in the claim's direction -> reproduced; any beyond the noise the
  other way, or any inside the noise (the seeds would have seen an effect of the size in question
  and did not) -> not reproduced; otherwise (some the seeds could not test) -> not testable here.
- **ratio** (a number of the paper against ours): ours / the paper's within ``TOLERANCE`` (relative)
  -> reproduced, else not reproduced. A normalised throughput is a ratio of two simulated
  throughputs on one profile; the published profiles are held to 20% of published end-to-end
  throughputs (``make validate-hw``) and the simulator to 10% of the engine (``make validate-sim``),
  so 15% is taken as agreement for a simulated number, and for a planned memory figure.
- **at most** (a claim that something stays small): ours at most the paper's, with the tolerance.
- **threshold** (a claim with a criterion): the criterion the claim states, met or not (the
  pipeline's speed-up at least 85% of the bubble's bound K·M/(M+K-1) — the engine benchmark's goal;
  a link keeping at least 95% of a free link's throughput).
- **exceeds** (a claim that one way beats another): by more than the tolerance.
- **contrast** (a claim that one model scales worse than another): the gap exceeds the tolerance
  (a contrast smaller than our tolerance is none we can claim).
- **exact** (a claim of equality, the synchronous update): bit-equal or not.
- **size step** (the largest model that fits): within one step of the planner's search (8 filters
  of AmoebaNet-D, one layer of Transformer-L) of the paper's size.

The source of the rows decides which *reproduced*: **reproduced (measured)** where they were measured
on this machine (the engine ran, a model was counted), **reproduced (simulated only)** where they come
from the simulator or the memory planner. **not testable here**: the data, scale or hardware the claim
needs are not available, or the seeds cannot tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .stats import UNTESTABLE as SEEDS_CANNOT_TELL
from .stats import Comparison

MEASURED = "reproduced (measured)"
SIMULATED = "reproduced (simulated only)"
NOT = "not reproduced"
UNTESTABLE = "not testable here"
VERDICTS = (MEASURED, SIMULATED, NOT, UNTESTABLE)

TOLERANCE = 0.15  # relative: ours / the paper's within 1 +- this (module doc)
LINK_OK = 0.95  # "communication is not the bottleneck": this share of a free link's throughput
# The rules' names, in the order the scorecard (``templates/scorecard.md.j2``) words each.
RULES = ("seeded", "ratio", "at most", "threshold", "exceeds", "contrast", "exact", "size step",
         "unavailable")  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """What a rule found: the verdict, our number(s) in words, and why in one line."""

    verdict: str
    ours: str
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is none of {', '.join(VERDICTS)}")


def reproduced(source: str) -> str:
    """The *reproduced* verdict of rows from ``source`` ("measured" or "simulated")."""
    return MEASURED if source == "measured" else SIMULATED


def within(ours: float, paper: float, tol: float = TOLERANCE) -> bool:
    """Rule *ratio*: ours / paper within 1 ± ``tol``."""
    return paper != 0 and abs(ours / paper - 1) <= tol


def at_most(ours: float, paper: float, tol: float = TOLERANCE) -> bool:
    """Rule *at most*: ours no more than the paper's by more than ``tol``."""
    return ours <= paper * (1 + tol)


def ratio(ours: float, paper: float, source: str, tol: float = TOLERANCE) -> str:
    """The verdict of rule *ratio*."""
    return reproduced(source) if within(ours, paper, tol) else NOT


def seeded(comparisons: Sequence[tuple[Comparison, int]], source: str = "measured") -> str:
    """Rule *seeded*: each comparison with the sign the claim expects of its difference (+1: b > a)."""
    beyond_for = [c.beyond and (c.delta > 0) == (sign > 0) for c, sign in comparisons]
    beyond_against = [c.beyond and (c.delta > 0) != (sign > 0) for c, sign in comparisons]
    if not comparisons:
        return UNTESTABLE
    if any(beyond_against):
        return NOT
    if all(beyond_for):
        return reproduced(source)
    if all(c.beyond or c.verdict == SEEDS_CANNOT_TELL for c, _ in comparisons):
        return UNTESTABLE
    return NOT


def exact(equal: bool, source: str = "measured") -> str:
    """Rule *exact*."""
    return reproduced(source) if equal else NOT
