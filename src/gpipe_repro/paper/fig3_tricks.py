"""The trainability tricks at depth (GPipe §5), the second sweep of ``make fig3``.

Experiment: ``gpipe-run -m experiment=fig3_tricks``: the deepest model trained here, T(16, 512, 4),
with and without the tricks (scaled feed-forward initialisation, clipped logits) on Fig. 3's data,
5 seeds. Rows: Fig. 3's (``paper.fig3``). Judged by ``paper.stats``, without against with: the largest
training loss after update 5 (the spike the paper's tricks prevent), the test NLL and BLEU averaged
over the languages; a run that diverged counts against its side. Render: ``fig3_tricks.md``,
``fig3_tricks.png`` (dev NLL against updates).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .artefact import SweepArtefact
from .fig3 import SKIP, Fig3Row, _curve, _key, _models, collect, label, of
from .plot import figure
from .provenance import Provenance
from .runs import failures, wall_time
from .stats import RULE, compare, sample


def tricks_markdown(rows: Sequence[Fig3Row], prov: Provenance) -> str:
    """The tricks' page: with against without, on the loss spike, the test NLL and BLEU."""
    on = next((m for m in _models(rows) if m[3]), None)
    off = next((m for m in _models(rows) if not m[3]), None)
    jobs = {r.job: r for r in rows}.values()
    wall = wall_time((r.started, r.ended) for r in rows)
    lines = [*prov.page("The trainability tricks at depth (GPipe §5)"), "", f"{wall}.", ""]
    if on is None or off is None or on[:3] != off[:3]:
        return "\n".join([*lines, "Needs one model with and without the tricks.", ""])
    lines += [
        f"{label(on)} with both tricks (scaled feed-forward init, logits clipped) against without; "
        "mean ± sd over seeds; NLL and BLEU of the test split averaged over the languages.",
        "",
        f"| | seeds | diverged | largest training loss after update {SKIP} | test NLL | test BLEU |",
        "|---|---|---|---|---|---|",
    ]
    spikes = [
        sample([r.max_train_loss for r in jobs if _key(r) == m and r.status == "ok"])
        for m in (on, off)
    ]
    for m, spike in zip((on, off), spikes):
        mine = [r for r in jobs if _key(r) == m]
        lines.append(
            f"| {'with' if m[3] else 'without'} | {len(mine)} | "
            f"{sum(r.status == 'diverged' for r in mine)} | {spike.text()} | "
            f"{of(rows, m, 'all', 'nll').text(3)} | {of(rows, m, 'all').text()} |"
        )
    judged = [
        (f"largest training loss after update {SKIP} (without - with)", spikes[0], spikes[1]),
        ("test NLL (without - with)", of(rows, on, "all", "nll"), of(rows, off, "all", "nll")),
        ("test BLEU (with - without)", of(rows, off, "all"), of(rows, on, "all")),
    ]
    results = [(what, compare(a, b)) for what, a, b in judged]
    needed = any(c.beyond and c.delta > 0 for _, c in results) or any(
        r.status == "diverged" and not r.tricks for r in jobs
    )
    verdict = (
        "needed here: without them training is worse beyond the noise (or diverged)"
        if needed
        else "not shown needed at this depth (no measure worse without them beyond the noise)"
    )
    return "\n".join(
        [
            *lines,
            "",
            "## Are the tricks needed at depth? (computed by `gpipe_repro.paper.stats`)",
            "",
            *(f"- {what}: {c.text(3)}." for what, c in results),
            f"- **The tricks: {verdict}.**",
            "",
            RULE,
            "",
            *failures((r.job, r.status, r.error) for r in rows),
        ]
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
    "fig3_tricks",
    Fig3Row,
    "Fig. 3's tricks: the deepest model here with and without the trainability tricks (GPipe §5).",
    collect,
    tricks_markdown,
    tricks_plot,
)
