"""Table 5's rows: per job its end (test split) and its learning curve (dev split, every
``train.eval_every`` updates), from every job's ``metrics.json`` of ``gpipe-run -m experiment=table5``.

The collect half of ``paper.table5`` (``reports.status`` counts it for the table); the series, the
trends judged by ``paper.stats`` and the page are the other half, computed from these rows alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artefact import Report
from .provenance import Provenance
from .runs import Job, job_times, read_sweep

END, DEV = "test", "dev"  # a row: a run's end (test split) or one of its curve points (dev split)


@dataclass
class Table5Row:
    """One job's end (test split) or one point of its dev learning curve."""

    job: str
    status: str
    split: str | None = None  # test: the run's end; dev: a learning-curve point
    M: int | None = None
    batch_tokens: int | None = None
    seed: int | None = None
    step: int | None = None
    tokens: int | None = None
    nll: float | None = None
    bleu: float | None = None
    model: str | None = None
    corpus: str | None = None
    lr: float | None = None
    started: float | None = None  # unix seconds: the job's start (its .hydra/ folder)
    ended: float | None = None  # unix seconds: its metrics.json written
    train_s: float | None = None  # the sum of its steps' times (metrics.json step_times_s)
    bleu_signature: str | None = None
    error: str | None = None


def _rows_of(j: Job, sweep: Path) -> list[Table5Row]:
    m, ev = j.metrics, j.metrics.eval
    cfg = m.model.config if m.model else {}
    base: dict[str, Any] = dict(
        job=j.name,
        status=m.status,
        M=m.pipeline.M if m.pipeline else None,
        batch_tokens=m.batch_size,
        seed=m.seed,
        model=f"T({cfg['L']},{cfg['H']},{cfg['A']}) d={cfg.get('d')}" if "L" in cfg else None,
        corpus=(m.data or {}).get("corpus"),
        lr=(m.optim or {}).get("lr"),
        train_s=round(sum(m.step_times_s), 3),
        error=m.error,
    )
    base["started"], base["ended"] = job_times(sweep / j.name)
    if m.status != "ok" or ev is None:
        return [Table5Row(**base)]
    steps = m.steps or len(m.losses)
    last = [p.tokens for p in m.curve if p.step == steps]  # target tokens seen, counted
    out = [
        Table5Row(
            **base,
            split=END,
            step=steps,
            tokens=last[0] if last else None,
            nll=ev.loss,
            bleu=ev.bleu,
            bleu_signature=ev.bleu_signature,
        )
    ]
    for p in m.curve:
        out.append(
            Table5Row(**base, split=DEV, step=p.step, tokens=p.tokens, nll=p.loss, bleu=p.bleu)
        )
    return out


def collect(sweep: Path) -> Report[Table5Row]:
    jobs = read_sweep(sweep)
    out = [r for j in jobs for r in _rows_of(j, sweep)]
    out.sort(
        key=lambda r: (r.M or 0, r.seed if r.seed is not None else -1, r.split or "", r.step or 0)
    )
    return Report(out, Provenance.of_jobs([j.metrics.env for j in jobs], sweep))
