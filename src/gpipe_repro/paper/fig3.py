"""Fig. 3 (GPipe §5): many->English BLEU per language against model capacity; and the trainability
tricks at depth, the second sweep of ``make fig3``. Both are artefacts of the same rows.

Experiment: ``gpipe-run -m experiment=fig3``: the smallest model T(1, 512, 4) and the
parameter-matched deep / wide pair T(4, 512, 4) / T(2, 1024, 8), one model for all languages (es
high-resource; ca, gl low-resource), 5 seeds. Collect: ``paper.fig3_rows`` (per job and language its end and its
learning curve). Claims, each judged by
``paper.stats`` (the paper prints no number for them: the effect in question is 10% of the
baseline's BLEU): (1) the capacity gain of deep and of wide over T1 per language; (2) whether it is
largest for low-resource languages (per seed, low minus high BLEU of the bigger model against the
smallest's); (3) deep against wide on low-resource languages. Render: ``fig3.md``, ``fig3.png``
(test BLEU per language and model; dev BLEU curves per language).

The tricks (``TRICKS``): ``gpipe-run -m experiment=fig3_tricks``: the deepest model trained here,
T(16, 512, 4), with and without the tricks (scaled feed-forward initialisation, clipped logits) on
Fig. 3's data, 5 seeds. Judged by ``paper.stats``, without against with: the largest training loss
after update 5 (the spike the paper's tricks prevent), the test NLL and BLEU averaged over the
languages; a run that diverged counts against its side. Whether the tricks make a deep model
*trainable* — the paper's claim — is judged only where both arms trained (``TRAINED_BLEU``);
otherwise the page says so, and what the data allow: the loss spike and the test NLL beside a
uniform guess's, ln(vocabulary). Render: ``fig3_tricks.md``, ``fig3_tricks.png`` (dev NLL against
updates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config.compose import CONF_DIR
from .artefact import SweepArtefact
from .claims import LEAD, answers
from .fig3_rows import DEV, END, SKIP, Fig3Row, collect
from .plot import figure
from .provenance import Provenance
from .runs import failures, wall_time
from .stats import RELATIVE_EFFECT, RULE, Comparison, Sample, compare, sample
from .template import render

Model = tuple[int, int, int, bool]  # L, H, A, tricks
SMALL: Model = (1, 512, 4, True)
DEEP: Model = (4, 512, 4, True)  # the deep / wide pair: the same parameters
WIDE: Model = (2, 1024, 8, True)
GROUPS = ("high", "low")


def label(m: Model) -> str:
    return f"T({m[0]},{m[1]},{m[2]})" + ("" if m[3] else " no tricks")


def _key(r: Fig3Row) -> Model:
    return (r.L, r.H, r.A, r.tricks)  # type: ignore[return-value]


def _ends(rows: Sequence[Fig3Row]) -> list[Fig3Row]:
    return [r for r in rows if r.status == "ok" and r.split == END and r.bleu is not None]


def languages(rows: Sequence[Fig3Row]) -> list[Fig3Row]:
    """Each language once, from most to least training data (the order of the paper's Fig. 3)."""
    seen: dict[str, Fig3Row] = {}
    for r in _ends(rows):
        seen.setdefault(str(r.language), r)
    return sorted(seen.values(), key=lambda r: (-(r.train_pairs or 0), str(r.language)))


def _by_seed(
    rows: Sequence[Fig3Row], m: Model, pick: str, metric: str = "bleu"
) -> dict[int, float]:
    """Per seed, ``metric`` at the end averaged over the languages that ``pick`` names: a language,
    a resource group, or "all"."""
    by: dict[int, list[float]] = {}
    for r in _ends(rows):
        if _key(r) == m and pick in (r.language, r.resource, "all"):
            by.setdefault(int(r.seed or 0), []).append(float(getattr(r, metric)))
    return {s: sum(v) / len(v) for s, v in by.items()}


def of(rows: Sequence[Fig3Row], m: Model, pick: str, metric: str = "bleu") -> Sample:
    return sample(list(_by_seed(rows, m, pick, metric).values()))


def _low_minus_high(rows: Sequence[Fig3Row], m: Model) -> Sample:
    lo, hi = _by_seed(rows, m, "low"), _by_seed(rows, m, "high")
    return sample([lo[s] - hi[s] for s in sorted(lo.keys() & hi.keys())])


def claims(rows: Sequence[Fig3Row]) -> dict[str, Any]:
    """The paper's Fig. 3 claims on capacity, each judged from the numbers: (1) per bigger model and
    language, against T1 (None: the models did not all run); (2) per bigger model, the gain on low-
    against high-resource languages (empty: not both kinds of language); (3) per resource group,
    deep against wide (None: either did not run)."""
    ran = {_key(r) for r in _ends(rows)}
    picks = [str(r.language) for r in languages(rows)]
    both = all(any(r.resource == g for r in _ends(rows)) for g in GROUPS)
    bigs = [m for m in (DEEP, WIDE) if m in ran]
    out: dict[str, Any] = {"capacity": None, "resource": [], "deep_wide": None}
    if SMALL not in ran or not bigs:
        return out
    out["capacity"] = [
        (label(big), lang, compare(of(rows, SMALL, lang), of(rows, big, lang)))
        for big in bigs
        for lang in picks
    ]
    for big in bigs if both else []:
        gain = {g: of(rows, big, g).mean - of(rows, SMALL, g).mean for g in GROUPS}
        effect = RELATIVE_EFFECT * of(rows, SMALL, "all").mean
        c = compare(_low_minus_high(rows, SMALL), _low_minus_high(rows, big), effect)
        out["resource"].append((label(big), gain["low"], gain["high"], c))
    if DEEP in ran and WIDE in ran:
        groups = [g for g in ("low", "high") if any(r.resource == g for r in _ends(rows))]
        out["deep_wide"] = [
            (g, of(rows, DEEP, g).text(), of(rows, WIDE, g).text(),
             compare(of(rows, WIDE, g), of(rows, DEEP, g)))
            for g in groups
        ]  # fmt: skip
    return out


def _models(rows: Sequence[Fig3Row]) -> list[Model]:
    return sorted({_key(r) for r in _ends(rows)}, key=lambda m: (not m[3], m[0] * m[1], m[0]))


def summary(rows: Sequence[Fig3Row]) -> dict[str, Any]:
    """What the page says: per model its label, parameters and BLEU per language, resource group
    and over all; the claims judged; the failures."""
    langs = languages(rows)
    picks = [*(str(r.language) for r in langs), *GROUPS, "all"]
    models = [
        (label(m), next(r.params for r in _ends(rows) if _key(r) == m),
         {pick: of(rows, m, pick) for pick in picks})
        for m in _models(rows)
    ]  # fmt: skip
    return {
        "wall": wall_time((r.started, r.ended) for r in rows),
        "languages": langs, "models": models,
        **claims(rows),
        "small": label(SMALL), "deep": label(DEEP), "wide": label(WIDE),
        "rule": RULE,
        "failed": failures((r.job, r.status, r.error) for r in rows),
    }  # fmt: skip


def markdown(rows: Sequence[Fig3Row], prov: Provenance, out: Path) -> str:
    title = "Fig. 3 — many->English BLEU per language vs model capacity"
    return render("fig3", prov, title, answers("fig3", out), LEAD, **summary(rows))


def _curve(
    rows: Sequence[Fig3Row], m: Model, lang: str | None, metric: str
) -> list[tuple[int, float]]:
    """(update, ``metric`` on the dev split mean over seeds), of one language or averaged over all."""
    dev = [r for r in rows if r.status == "ok" and r.split == DEV and _key(r) == m]
    dev = [r for r in dev if lang in (None, r.language) and getattr(r, metric) is not None]
    steps = sorted({int(r.step or 0) for r in dev})
    return [(s, sample([getattr(r, metric) for r in dev if r.step == s]).mean) for s in steps]


def plot(rows: Sequence[Fig3Row], path: Path) -> None:
    langs = languages(rows)
    models = _models(rows)
    with figure(path, 1, 1 + len(langs), figsize=(4 * (1 + len(langs)), 4)) as (fig, axes):
        axes = list(axes) if len(langs) else [axes]
        for i, m in enumerate(models):
            st = [of(rows, m, str(r.language)) for r in langs]
            axes[0].errorbar([k + 0.06 * (i - 1) for k in range(len(langs))], [s.mean for s in st],
                             yerr=[s.sd for s in st], fmt="o-", capsize=3, color=f"C{i}", label=label(m))  # fmt: skip
            for ax, r in zip(axes[1:], langs):
                pts = _curve(rows, m, r.language, "bleu")
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    "o-",
                    ms=3,
                    color=f"C{i}",
                    label=label(m),
                )
        names = [f"{r.language}\n{r.resource}{'*' if r.synthetic else ''}" for r in langs]
        axes[0].set_xticks(range(len(langs)), names)
        axes[0].set(title="test BLEU, mean ± sd over seeds", xlabel="source language (* synthetic)")
        for ax, r in zip(axes[1:], langs):
            ax.set(title=f"{r.language} ({r.resource}): dev BLEU", xlabel="updates")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.suptitle("many->English, one model for all languages (in the manner of GPipe Fig. 3)")


# -- the tricks at depth (``experiment=fig3_tricks``) ------------------------------------------

# An arm whose mean test BLEU is below this has not learnt to translate: a comparison of two
# recipes that both fail to train says nothing about which trains a deep model.
TRAINED_BLEU = 1.0
CONFIGURED = CONF_DIR / "experiment" / "fig3.yaml"  # the runs' data, where the CSV lacks it


def vocabulary(rows: Sequence[Fig3Row]) -> tuple[int | None, bool]:
    """The vocabulary the runs used, and whether the rows recorded it (else it is read from the
    experiment's configuration: a CSV collected before the column existed; None: from neither)."""
    v = next((r.vocab for r in rows if r.vocab), None)
    if v:
        return v, True
    try:
        return int(yaml.safe_load(CONFIGURED.read_text())["data"]["vocab_size"]), False
    except (OSError, KeyError, TypeError, ValueError):
        return None, False


@dataclass
class Arms:
    """The tricks' pair: with (``on``) and without (``off``), and what is judged of them."""

    on: Model
    off: Model
    updates: int
    bleu: tuple[Sample, Sample]  # with, without
    nll: tuple[Sample, Sample]
    spikes: tuple[Sample, Sample]  # the largest training loss after update SKIP
    results: list[tuple[str, Comparison]]  # each: the claim's way is a positive difference
    vocab: int | None
    recorded: bool  # the vocabulary by the rows, else by ``CONFIGURED``

    @property
    def trained(self) -> bool:
        """Whether both arms learnt to translate (``TRAINED_BLEU``)."""
        return min(self.bleu[0].mean, self.bleu[1].mean) >= TRAINED_BLEU

    @property
    def uniform(self) -> float | None:
        """A uniform guess's NLL per token, ln(vocabulary)."""
        return math.log(self.vocab) if self.vocab else None


def arms(rows: Sequence[Fig3Row]) -> Arms | None:
    """With against without the tricks on the loss spike, the test NLL and BLEU (None: not one
    model with and without them)."""
    on = next((m for m in _models(rows) if m[3]), None)
    off = next((m for m in _models(rows) if not m[3]), None)
    if on is None or off is None or on[:3] != off[:3]:
        return None
    jobs = {r.job: r for r in rows}.values()

    def spike(m: Model) -> Sample:
        return sample([r.max_train_loss for r in jobs if _key(r) == m and r.status == "ok"])

    spikes = (spike(on), spike(off))
    nll, bleu = (of(rows, on, "all", "nll"), of(rows, off, "all", "nll")), (of(rows, on, "all"), of(rows, off, "all"))  # fmt: skip
    judged = [
        (f"largest training loss after update {SKIP} (without - with)", *spikes),
        ("test NLL (without - with)", *nll),
        ("test BLEU (with - without)", bleu[1], bleu[0]),
    ]
    vocab, where = vocabulary(rows)
    updates = max((r.step or 0 for r in rows if r.split == "test"), default=0)
    results = [(what, compare(a, b)) for what, a, b in judged]
    return Arms(on, off, updates, bleu, nll, spikes, results, vocab, where)


def tricks_summary(rows: Sequence[Fig3Row]) -> dict[str, Any]:
    """What the page says: with against without the tricks on the loss spike, the test NLL and
    BLEU, and each arm's runs (``arms`` None: not one model with and without them)."""
    jobs = {r.job: r for r in rows}.values()
    wall, a = wall_time((r.started, r.ended) for r in rows), arms(rows)
    if a is None:
        return {"wall": wall, "arms": None}
    needed = any(c.beyond and c.delta > 0 for _, c in a.results) or any(
        r.status == "diverged" and not r.tricks for r in jobs
    )  # where both arms trained: worse without them beyond the noise, or diverged
    return {"wall": wall, "arms": a, "model": label(a.on), "skip": SKIP,
            "runs": [[r for r in jobs if _key(r) == m] for m in (a.on, a.off)],
            "needed": needed, "trained_bleu": TRAINED_BLEU, "rule": RULE,
            "failed": failures((r.job, r.status, r.error) for r in rows),
            "configured": CONFIGURED.name}  # fmt: skip


def tricks_markdown(rows: Sequence[Fig3Row], prov: Provenance, out: Path) -> str:
    """The tricks' page: with against without, on the loss spike, the test NLL and BLEU."""
    title = "The trainability tricks at depth (GPipe §5)"
    return render(
        "fig3_tricks", prov, title, answers("fig3_tricks", out), LEAD, **tricks_summary(rows)
    )


def tricks_plot(rows: Sequence[Fig3Row], path: Path) -> None:
    with figure(path, 1, 1, figsize=(6, 4)) as (fig, ax):
        for i, m in enumerate(_models(rows)):
            pts = _curve(rows, m, None, "nll")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{i}", label=label(m))
        ax.set(xlabel="updates", ylabel="dev NLL (mean over languages and seeds)",
               title="the tricks at depth: dev NLL against updates")  # fmt: skip
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)


ARTEFACT = SweepArtefact(
    "fig3",
    Fig3Row,
    "Fig. 3: many->English BLEU per language against model capacity (GPipe §5).",
    collect,
    markdown,
    plot,
)
TRICKS = SweepArtefact(
    "fig3_tricks",
    Fig3Row,
    "Fig. 3's tricks: the deepest model here with and without the trainability tricks (GPipe §5).",
    collect,
    tricks_markdown,
    tricks_plot,
)
