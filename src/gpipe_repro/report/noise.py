"""Seed noise: means, spreads and whether a difference between two settings stands out of it.

A report that says a trend reproduced must say whether it is larger than what changing the seed
alone does. The rule, stated once for every report: two settings measured over seeds differ
**beyond the seed noise** when their means differ by more than ``Z`` standard errors of the
difference, ``|mean_a - mean_b| > Z * sqrt(sd_a^2 / n_a + sd_b^2 / n_b)`` (sample standard
deviations, Welch's standard error); with a single seed on either side nothing can be said.
Z = 2 is roughly a 95% two-sided level for many seeds and a looser one for three.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Z", "Stat", "Diff", "stat", "diff", "describe_trend"]

Z = 2.0


@dataclass(frozen=True)
class Stat:
    mean: float
    sd: float  # sample standard deviation (n - 1); 0 for one value
    n: int

    def text(self, digits: int = 2) -> str:
        return (
            f"{self.mean:.{digits}f} ± {self.sd:.{digits}f}"
            if self.n > 1
            else f"{self.mean:.{digits}f}"
        )


@dataclass(frozen=True)
class Diff:
    delta: float  # mean of b minus mean of a
    se: float | None  # standard error of the difference; None with a single seed on a side
    beyond: bool | None  # |delta| > Z * se; None when it cannot be told

    def text(self, digits: int = 2) -> str:
        if self.se is None:
            return f"{self.delta:+.{digits}f} (one seed: noise unknown)"
        where = "beyond" if self.beyond else "inside"
        return f"{self.delta:+.{digits}f} (± {self.se:.{digits}f} s.e., {where} the seed noise)"


def stat(values: Sequence[float]) -> Stat:
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return Stat(math.nan, math.nan, 0)
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return Stat(mean, sd, len(vals))


def diff(a: Stat, b: Stat) -> Diff:
    """b - a, and whether it is beyond the seed noise (module doc)."""
    if a.n < 2 or b.n < 2:
        return Diff(b.mean - a.mean, None, None)
    se = math.sqrt(a.sd**2 / a.n + b.sd**2 / b.n)
    return Diff(b.mean - a.mean, se, abs(b.mean - a.mean) > Z * se)


def describe_trend(
    stats: Sequence[Stat], labels: Sequence[str], metric: str, higher_is_better: bool
) -> tuple[str, bool | None]:
    """One sentence on whether ``metric`` improves step by step along ``stats`` (ordered), and a
    verdict: True = every step improves beyond the noise, False = some step goes the wrong way
    beyond the noise, None = the direction holds or not only inside the noise."""
    if len(stats) < 2:
        return f"{metric}: one setting only; no trend to judge.", None
    steps = [diff(a, b) for a, b in zip(stats, stats[1:])]
    sign = 1 if higher_is_better else -1
    better = [d.delta * sign > 0 for d in steps]
    beyond = [d.beyond for d in steps]
    parts = [f"{labels[i]} -> {labels[i + 1]}: {d.text()}" for i, d in enumerate(steps)]
    word = "rises" if higher_is_better else "falls"
    if all(better) and all(b is True for b in beyond):
        verdict, head = True, f"{metric} {word} at every step, each beyond the seed noise"
    elif any(not ok and b is True for ok, b in zip(better, beyond)):
        verdict, head = False, f"{metric} goes the wrong way beyond the seed noise at some step"
    elif all(better):
        verdict, head = (
            None,
            f"{metric} {word} at every step, but not every step is beyond the seed noise",
        )
    else:
        verdict = None
        head = (
            f"{metric} does not {word.rstrip('s')} at every step; the steps that go the wrong way "
            "are inside the seed noise"
        )
    return f"{head} ({'; '.join(parts)}).", verdict
