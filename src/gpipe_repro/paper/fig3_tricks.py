"""The trainability tricks at depth (GPipe §5), the second sweep of ``make fig3``.

Experiment: ``gpipe-run -m experiment=fig3_tricks``: the deepest model trained here, T(16, 512, 4),
with and without the tricks (scaled feed-forward initialisation, clipped logits) on Fig. 3's data,
5 seeds. Rows: Fig. 3's (``paper.fig3``). Judged by ``paper.stats``, without against with: the largest
training loss after update 5 (the spike the paper's tricks prevent), the test NLL and BLEU averaged
over the languages; a run that diverged counts against its side. Whether the tricks make a deep
model *trainable* — the paper's claim — is judged only where both arms trained (``TRAINED_BLEU``);
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
from .fig3 import Model, _curve, _key, _models, label, of
from .fig3_rows import SKIP, Fig3Row, collect
from .plot import figure
from .provenance import Provenance
from .runs import failures, wall_time
from .stats import RULE, Comparison, Sample, compare, sample
from .template import render

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


def summary(rows: Sequence[Fig3Row]) -> dict[str, Any]:
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
    return render("fig3_tricks", prov, title, answers("fig3_tricks", out), LEAD, **summary(rows))


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
    "fig3_tricks",
    Fig3Row,
    "Fig. 3's tricks: the deepest model here with and without the trainability tricks (GPipe §5).",
    collect,
    tricks_markdown,
    tricks_plot,
)
