"""Fig. 3's rows: per job and language its end (test split) and its learning curve (dev split),
from every job's ``metrics.json`` of ``gpipe-run -m experiment=fig3`` (and of its tricks' sweep).

The collect half of ``paper.fig3``'s two artefacts, ``ARTEFACT`` and ``TRICKS`` (``reports.status``
counts it for both); the claims, the summaries and the pages are the other half, computed from these
rows alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..metrics.contract import RunMetrics
from ..typed_csv import later
from .artefact import Report
from .provenance import Provenance
from .runs import job_times, read_sweep

END, DEV = "test", "dev"
SKIP = 5  # the tricks' sweep: the largest training loss after this update


@dataclass
class Fig3Row:
    """One job's end (test split) or one point of its dev learning curve, for one language."""

    job: str
    status: str
    L: int | None = None
    H: int | None = None
    A: int | None = None
    tricks: bool = False
    params: int | None = None
    seed: int | None = None
    split: str | None = None  # test: the run's end; dev: a learning-curve point
    step: int | None = None
    language: str | None = None
    resource: str | None = None
    train_pairs: int | None = None
    synthetic: bool | None = None
    bleu: float | None = None
    nll: float | None = None
    max_train_loss: float | None = None  # the largest training loss after update SKIP
    started: float | None = None  # unix seconds (``runs.job_times``)
    ended: float | None = None
    error: str | None = None
    vocab: int | None = later()  # the data's vocabulary (pieces): a uniform guess scores ln(vocab)


def _rows_of(job: str, m: RunMetrics, folder: Path) -> list[Fig3Row]:
    cfg = m.model.config if m.model else {}
    langs = (m.eval.by_language if m.eval else None) or {}
    status, error = m.status, m.error
    if status == "ok" and not langs:
        status, error = "failed", "no eval.by_language in metrics.json (not a data.corpora run?)"
    late = [x for x in m.losses[SKIP:]]
    started, ended = job_times(folder)
    base: dict[str, Any] = dict(
        job=job,
        status=status,
        L=cfg.get("L"),
        H=cfg.get("H"),
        A=cfg.get("A"),
        tricks=bool(cfg.get("ffn_init_scale")) and cfg.get("logit_clip") is not None,
        params=m.model.param_count if m.model else None,
        seed=m.seed,
        # a non-finite loss counts as infinitely large
        max_train_loss=max(float("inf") if x is None else x for x in late) if late else None,
        started=started,
        ended=ended,
        error=error,
        vocab=(m.data or {}).get("vocab_size"),
    )
    if not langs:
        return [Fig3Row(**base)]
    out = []
    for lang, v in langs.items():
        meta: dict[str, Any] = dict(language=lang, resource=v.get("resource"), train_pairs=v.get("train_pairs"),
                    synthetic=v.get("synthetic"))  # fmt: skip
        out.append(
            Fig3Row(**base, **meta, split=END, step=m.steps, bleu=v.get("bleu"), nll=v.get("nll"))
        )
        for p in m.curve:
            at = (p.by_language or {}).get(lang, {})
            out.append(
                Fig3Row(
                    **base, **meta, split=DEV, step=p.step, bleu=at.get("bleu"), nll=at.get("nll")
                )
            )
    return out


def collect(sweep: Path) -> Report[Fig3Row]:
    jobs = read_sweep(sweep)
    rows = [r for j in jobs for r in _rows_of(j.name, j.metrics, sweep / j.name)]
    return Report(rows, Provenance.of_jobs([j.metrics.env for j in jobs], sweep))
