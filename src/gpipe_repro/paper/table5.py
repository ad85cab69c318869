"""Table 5 (GPipe §5): BLEU and NLL against the batch size in tokens, ours beside the paper's row.

Experiment: ``gpipe-run -m experiment=table5`` (``conf/experiment/table5.yaml``: one job per
micro-batch count M and seed, the micro-batch fixed, so the batch in tokens grows with M). Collect:
every job's ``metrics.json``. Rows: one per job, the paper's 260K / 1M / 4M row set by the rank of
the batch size. Summary: mean ± sd over seeds per batch size, and whether each step of the trend is
beyond the noise (``paper.stats``; the effect in question: the paper's relative change between the
same two rows, applied to our mean). Render: ``table5.md``, ``table5.png``. Ours are measured; the
paper's are quoted (``paper.numbers``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .artefact import Artefact, Report
from .numbers import quote, rows
from .plot import figure
from .provenance import Provenance
from .runs import read_sweep
from .stats import RULE, Sample, sample, trend


@dataclass
class Table5Row:
    job: str
    status: str
    source: str | None = None
    batch_tokens: int | None = None
    M: int | None = None
    K: int | None = None
    micro_batch_tokens: int | None = None
    seed: int | None = None
    steps: int | None = None
    bleu: float | None = None
    nll: float | None = None
    final_train_loss: float | None = None
    tokens_per_s: float | None = None
    paper_batch_tokens: str | None = None
    paper_bleu: float | None = None
    paper_nll: float | None = None
    corpus: str | None = None
    model: str | None = None
    params: int | None = None
    lr: float | None = None
    bleu_signature: str | None = None
    error: str | None = None


PAPER = rows(5)  # the paper's batch sizes, "260K", "1M", "4M"


def tokens(label: str) -> float:
    return float(label.replace("K", "e3").replace("M", "e6"))


def collect(sweep: Path) -> Report[Table5Row]:
    """One row per job; the paper's columns set by the rank of the batch size (smallest = 260K)."""
    jobs = read_sweep(sweep)
    out = []
    for j in jobs:
        m, ev, p = j.metrics, j.metrics.eval, j.metrics.pipeline
        cfg, data = (m.model.config if m.model else {}), m.data or {}
        losses = [x for x in m.losses if x is not None]
        out.append(
            Table5Row(
                job=j.name,
                **{k: getattr(m, k) for k in ("status", "source", "seed", "steps", "tokens_per_s")},
                batch_tokens=m.batch_size,
                M=p.M if p else None,
                K=p.K if p else None,
                micro_batch_tokens=m.batch_size // p.M if m.batch_size and p else None,
                bleu=ev.bleu if ev else None,
                nll=ev.loss if ev else None,
                final_train_loss=losses[-1] if losses else None,
                corpus=data.get("root") or data.get("corpus"),
                model=f"T({cfg.get('L')},{cfg.get('H')},{cfg.get('A')}) d={cfg.get('d')}"
                if cfg
                else (m.model.name if m.model else None),
                params=m.model.param_count if m.model else None,
                lr=(m.optim or {}).get("lr"),
                bleu_signature=ev.bleu_signature if ev else None,
                error=m.error,
            )
        )
    sizes = sorted({r.batch_tokens for r in out if r.batch_tokens is not None})
    for r in out:
        if r.batch_tokens in sizes and sizes.index(r.batch_tokens) < len(PAPER):
            label = PAPER[sizes.index(r.batch_tokens)]
            r.paper_batch_tokens = label
            r.paper_bleu = quote(5, label, "BLEU").value
            r.paper_nll = quote(5, label, "NLL").value
    out.sort(key=lambda r: (r.batch_tokens or 0, r.seed if r.seed is not None else -1, r.job))
    return Report(out, Provenance.of_jobs([j.metrics.env for j in jobs], sweep))


@dataclass
class Size:
    """One batch size over seeds (ok jobs), the paper's row beside."""

    batch_tokens: int
    rows: list[Table5Row]

    def of(self, metric: str) -> Sample:
        return sample([getattr(r, metric) for r in self.rows])


def summarise(rows: Sequence[Table5Row]) -> list[Size]:
    ok = [r for r in rows if r.status == "ok" and r.bleu is not None]
    sizes = sorted({r.batch_tokens for r in ok if r.batch_tokens is not None})
    return [Size(b, [r for r in ok if r.batch_tokens == b]) for b in sizes]


def verdicts(sizes: Sequence[Size]) -> list[str]:
    labels = [f"{s.batch_tokens:,}" for s in sizes]
    lines = []
    for metric, name, higher in (("bleu", "BLEU", True), ("nll", "NLL", False)):
        paper = [getattr(s.rows[0], f"paper_{metric}") for s in sizes]
        effects = [  # the paper's relative step, on our scale
            None if p0 is None or p1 is None else (p1 - p0) / p0 * s.of(metric).mean
            for p0, p1, s in zip(paper, paper[1:], sizes)
        ]
        text, ok = trend([s.of(metric) for s in sizes], labels, name, higher, effects)
        word = {
            True: "reproduced, beyond the noise",
            False: "not reproduced (the opposite, beyond the noise)",
            None: "not shown beyond the noise",
        }[ok]
        lines += [
            f"- {text}",
            f"- **The paper's {name} trend (better with a bigger batch): {word}.**",
        ]
    return lines[0::2] + lines[1::2]


def markdown(rows: Sequence[Table5Row], prov: Provenance) -> str:
    sizes = summarise(rows)
    lines = [
        *prov.page("Table 5 — batch size (tokens) vs BLEU and NLL"),
        "",
        "| batch (tokens) | M | seeds | BLEU (measured) | NLL / token (measured) | paper batch | paper BLEU "
        "| paper NLL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        r = s.rows[0]
        lines.append(
            f"| {s.batch_tokens:,} | {r.M} | {len(s.rows)} | {s.of('bleu').text()} | "
            f"{s.of('nll').text(3)} | {r.paper_batch_tokens or '—'} | {r.paper_bleu or '—'} | "
            f"{r.paper_nll or '—'} |"
        )
    ok = [r for r in rows if r.status == "ok"]
    cols = ("model", "params", "corpus", "steps", "lr", "K", "micro_batch_tokens")
    same = ", ".join(f"{c} {'/'.join(sorted({str(getattr(r, c)) for r in ok}))}" for c in cols)
    ratios = [
        tokens(s.rows[0].paper_batch_tokens) / s.batch_tokens
        for s in sizes
        if s.rows[0].paper_batch_tokens
    ]
    lines += [
        "",
        "Mean ± sample standard deviation over seeds. Ours: test split (BLEU on the first "
        "`train.eval_limit` sentences, greedy decoding; NLL per target token over the whole split). "
        f"Every job: {same}: the same updates and optimiser settings, only M (so the batch) differs."
        + (
            f" The paper's: German->English, Transformer-Big, batches {min(ratios):,.0f}-{max(ratios):,.0f}x "
            "ours."
            if ratios
            else ""
        ),
        "",
        "## Did the trend reproduce? (computed by `gpipe_repro.paper.stats`)",
        "",
        *verdicts(sizes),
        "",
        RULE,
        "",
        "## Every job",
        "",
        "| job | status | batch | M | seed | BLEU | NLL | last train loss | tokens/s | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = lambda v, d=2: "—" if v is None else f"{v:.{d}f}"  # noqa: E731
        lines.append(
            f"| {r.job} | {r.status} | {r.batch_tokens} | {r.M} | {r.seed} | {f(r.bleu)} | "
            f"{f(r.nll, 3)} | {f(r.final_train_loss, 3)} | {f(r.tokens_per_s, 0)} | "
            f"{(r.error or '').replace('|', '/')[:80]} |"
        )
    sigs = sorted({r.bleu_signature for r in rows if r.bleu_signature})
    return "\n".join([*lines, "", f"sacrebleu signature: `{'`, `'.join(sigs) or '—'}`", ""])


def plot(rows: Sequence[Table5Row], path: Path) -> None:
    sizes = summarise(rows)
    with figure(path, 1, 3, figsize=(13, 3.8)) as (fig, axes):
        ok = [r for s in sizes for r in s.rows]
        xs = [s.batch_tokens for s in sizes]
        for ax, key, label in ((axes[0], "bleu", "BLEU"), (axes[1], "nll", "NLL per target token")):
            ax.scatter(
                [r.batch_tokens for r in ok],
                [getattr(r, key) for r in ok],
                s=12,
                c="0.6",
                label="one seed",
            )
            st = [s.of(key) for s in sizes]
            ax.errorbar(
                xs,
                [s.mean for s in st],
                yerr=[s.sd for s in st],
                fmt="o-",
                capsize=4,
                label="mean ± sd",
            )
            ax.set(
                xscale="log",
                xlabel="batch (target tokens), grown through M",
                ylabel=label,
                title=f"ours (measured): {label}",
            )
            ax.set_xticks(xs, [f"{x:,}" for x in xs])
            ax.minorticks_off()
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
        px = [tokens(b) for b in PAPER]
        axes[2].plot(px, [quote(5, b, "BLEU").value for b in PAPER], "s-", color="C2", label="BLEU")
        twin = axes[2].twinx()
        twin.plot(px, [quote(5, b, "NLL").value for b in PAPER], "^--", color="C3", label="NLL")
        axes[2].set(
            xscale="log", xlabel="batch (tokens)", ylabel="BLEU", title="paper (Table 5, de->en)"
        )
        twin.set_ylabel("NLL")
        axes[2].set_xticks(px, PAPER)
        axes[2].minorticks_off()


class Table5(Artefact[Table5Row]):
    """Table 5: BLEU and NLL against the batch size in tokens (GPipe §5)."""

    name = folder = page = "table5"
    row = Table5Row
    command = "gpipe-run -m experiment=table5"
    sweep = True

    def collect(
        self, source: Path | None, opts: argparse.Namespace, out: Path
    ) -> Report[Table5Row]:
        assert source is not None  # make() asks for --from SWEEP first
        return collect(source)

    def markdown(self, report: Report[Table5Row]) -> str:
        return markdown(report.rows, report.provenance)

    def plot(self, report: Report[Table5Row], path: Path) -> None:
        plot(report.rows, path)


ARTEFACT = Table5()
