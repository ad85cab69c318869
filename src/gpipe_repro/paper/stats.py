"""The one noise rule for every seeded claim: is a difference between two settings beyond the seeds' noise?

Two settings, each measured over seeds, are compared by **Welch's t-test** (``scipy.stats.ttest_ind``,
unequal variances; Welch–Satterthwaite degrees of freedom), two-sided, alpha = 0.05. Beside the test
stands the **smallest effect these seeds could have detected** at 80% power: the difference d at which
a two-sided Welch test at alpha = 0.05 rejects with probability 0.8, taking the sample standard
deviations as the true ones — the noncentral-t approximation (the statistic is noncentral t with the
Welch df and noncentrality d / se, se = sqrt(sd_a^2/n_a + sd_b^2/n_b)).

The verdict, in words, against the **effect in question** E (the size of effect the claim is about, on
our scale: the paper's relative change applied to our baseline mean where the paper prints one —
Table 5 —, else ``RELATIVE_EFFECT`` of the baseline mean, the observed scale):

- *not testable with these seeds*: fewer than 2 seeds on a side, no spread at all, or p >= 0.05 and
  the detectable effect exceeds E (the seeds could not have seen an effect of the size in question);
- *beyond the noise*: p < 0.05;
- *inside the noise*: p >= 0.05 and the seeds could have detected E (detectable effect <= E).

Every seeded page states this rule in one paragraph (``templates/stats.md.j2``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import optimize, stats

from .template import words

ALPHA = 0.05
POWER = 0.80
# The effect in question where the paper prints none: 10% of the baseline mean.
RELATIVE_EFFECT = 0.10
BEYOND, INSIDE, UNTESTABLE = "beyond the noise", "inside the noise", "not testable with these seeds"
RULE = words("stats", "rule", relative_effect=RELATIVE_EFFECT)  # as every seeded page states it


@dataclass(frozen=True)
class Sample:
    """One setting's values over seeds."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n if self.n else math.nan

    @property
    def sd(self) -> float:
        """Sample standard deviation (n - 1); 0 for one value."""
        if self.n < 2:
            return 0.0 if self.n else math.nan
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (self.n - 1))

    def text(self, digits: int = 2) -> str:
        sd = f" ± {self.sd:.{digits}f}" if self.n > 1 else ""
        return f"{self.mean:.{digits}f}{sd}"


def sample(values: Sequence[float | None]) -> Sample:
    return Sample(tuple(float(v) for v in values if v is not None and math.isfinite(v)))


def detectable_effect(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference a two-sided t-test (``df`` degrees of freedom, standard error ``se``) detects
    with probability ``power``: noncentral t with noncentrality d / se."""
    crit = stats.t.ppf(1 - alpha / 2, df)

    def rejects(nc: float) -> float:  # scipy's nct gives nan far in the tail, where it is 1
        p = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
        return 1.0 if math.isnan(p) else p

    hi = crit + 1.0
    while rejects(hi) < power:
        hi *= 2
    return se * float(optimize.brentq(lambda nc: rejects(nc) - power, 0.0, hi))


@dataclass(frozen=True)
class Comparison:
    """b against a: the difference of means, Welch's test, the detectable effect and the verdict."""

    delta: float  # mean b - mean a
    t: float | None
    df: float | None
    p: float | None
    detectable: float | None  # the smallest |delta| these seeds detect at 80% power
    effect: float | None  # the effect in question (module doc)
    verdict: str

    @property
    def beyond(self) -> bool:
        return self.verdict == BEYOND

    def text(self, digits: int = 2) -> str:
        if self.p is None or self.t is None or self.df is None or self.detectable is None:
            return f"{self.delta:+.{digits}f} ({self.verdict})"
        eff = "" if self.effect is None else f", in question {self.effect:.{digits}f}"
        p = "p < 0.001" if self.p < 0.001 else f"p = {self.p:.3f}"
        return (
            f"{self.delta:+.{digits}f} (t = {self.t:.2f}, df = {self.df:.1f}, {p}; "
            f"detectable {self.detectable:.{digits}f}{eff}: {self.verdict})"
        )


def compare(a: Sample, b: Sample, effect: float | None = None) -> Comparison:
    """b - a by the rule of the module doc; ``effect``: the effect in question (default: the observed
    scale, ``RELATIVE_EFFECT`` of |mean a|)."""
    delta = b.mean - a.mean
    se = math.sqrt(a.sd**2 / a.n + b.sd**2 / b.n) if a.n > 1 and b.n > 1 else 0.0
    if se == 0.0:
        return Comparison(delta, None, None, None, None, effect, UNTESTABLE)
    res = stats.ttest_ind(b.values, a.values, equal_var=False)
    t, p, df = float(res.statistic), float(res.pvalue), float(res.df)
    e = abs(effect) if effect is not None else RELATIVE_EFFECT * abs(a.mean)
    d = detectable_effect(se, df)
    verdict = BEYOND if p < ALPHA else INSIDE if d <= e else UNTESTABLE
    return Comparison(delta, t, df, p, d, e, verdict)


def trend(
    samples: Sequence[Sample],
    labels: Sequence[str],
    metric: str,
    higher_is_better: bool,
    effects: Sequence[float | None] | None = None,
) -> tuple[str, bool | None]:
    """One sentence on whether ``metric`` improves step by step along ``samples``
    (``templates/stats.md.j2``) and a verdict: True = every step improves beyond the noise, False =
    some step goes the wrong way beyond the noise, None = neither shown. ``effects``: each step's
    effect in question."""
    effects = effects or [None] * (len(samples) - 1)
    steps = [compare(a, b, e) for a, b, e in zip(samples, samples[1:], effects)]
    better = [(d.delta > 0) == higher_is_better for d in steps]
    verdict: bool | None
    if len(samples) < 2:
        verdict, shape = None, "one"
    elif all(better) and all(d.beyond for d in steps):
        verdict, shape = True, "beyond"
    elif any(not ok and d.beyond for ok, d in zip(better, steps)):
        verdict, shape = False, "wrong"
    else:
        verdict, shape = None, "every" if all(better) else "mixed"
    text = words("stats", "trend", metric=metric, shape=shape, higher=higher_is_better,
                 steps=list(zip(labels, labels[1:], steps)))  # fmt: skip
    return text, verdict


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (``scipy.stats.spearmanr``, ties averaged); None where it is
    undefined (a constant side)."""
    if len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(stats.spearmanr(a, b).statistic)


def median(xs: Sequence[float]) -> float | None:
    """The median of ``xs`` (``statistics.median``); None for none."""
    return statistics.median(xs) if xs else None
