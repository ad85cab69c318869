"""Table 5 report: BLEU and NLL against the batch size in tokens, ours beside the paper's row.

Reads the ``metrics.json`` of every job of a ``gpipe-run -m experiment=table5`` sweep (one job per
micro-batch count M and seed, the micro-batch fixed, so the batch in tokens grows with M) and writes
``results.csv`` (one row per job), ``table5.md`` (mean ± sd over seeds per batch size, the paper's
260K / 1M / 4M row beside it, and whether the trend reproduced — judged by ``report.noise``, not typed)
and ``table5.png``. All our numbers are measured (``source`` in the CSV); the paper's are quoted.

Re-run on any sweep folder: ``python -m gpipe_repro.report.table5 multirun/<date>/<time> [--out DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .experiments import hardware_header
from .noise import Stat, describe_trend, stat

__all__ = ["PAPER", "COLUMNS", "load_rows", "summarise", "write", "main"]

# GPipe Table 5 (German->English, Transformer-Big T(6, 8192, 16), same optimiser settings).
PAPER: list[tuple[str, float, float]] = [
    ("260K", 30.92, 2.58),
    ("1M", 31.86, 2.51),
    ("4M", 32.71, 2.46),
]
COLUMNS = [
    "job",
    "status",
    "source",
    "batch_tokens",
    "M",
    "K",
    "micro_batch_tokens",
    "seed",
    "steps",
    "bleu",
    "nll",
    "final_train_loss",
    "tokens_per_s",
    "paper_batch_tokens",
    "paper_bleu",
    "paper_nll",
    "corpus",
    "model",
    "params",
    "lr",
    "bleu_signature",
    "error",
]


def _job_row(job: str, m: dict[str, Any]) -> dict[str, Any]:
    pipe, ev, data = m.get("pipeline") or {}, m.get("eval") or {}, m.get("data") or {}
    model, optim = m.get("model") or {}, m.get("optim") or {}
    losses = [x for x in m.get("losses") or [] if x is not None]
    cfg = model.get("config") or {}
    batch, M = m.get("batch_size"), pipe.get("M")
    return {
        "job": job,
        "status": m.get("status"),
        "source": m.get("source"),
        "batch_tokens": batch,
        "M": M,
        "K": pipe.get("K"),
        "micro_batch_tokens": batch // M if batch and M else None,
        "seed": m.get("seed"),
        "steps": m.get("steps"),
        "bleu": ev.get("bleu"),
        "nll": ev.get("loss"),
        "final_train_loss": losses[-1] if losses else None,
        "tokens_per_s": m.get("tokens_per_s"),
        "paper_batch_tokens": None,
        "paper_bleu": None,
        "paper_nll": None,
        "corpus": data.get("corpus") if not data.get("root") else data.get("root"),
        "model": f"T({cfg.get('L')},{cfg.get('H')},{cfg.get('A')}) d={cfg.get('d')}"
        if cfg
        else model.get("name"),
        "params": model.get("param_count"),
        "lr": optim.get("lr"),
        "bleu_signature": ev.get("bleu_signature"),
        "error": m.get("error"),
    }


def load_rows(sweep: Path) -> list[dict[str, Any]]:
    """One row per job; the paper's columns set by the rank of the batch size (smallest = 260K)."""
    rows = []
    for path in sorted(sweep.glob("*/metrics.json")):
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            m = {"status": "failed", "error": f"unreadable metrics.json: {err}"}
        rows.append(_job_row(path.parent.name, m))
    sizes = sorted({r["batch_tokens"] for r in rows if isinstance(r["batch_tokens"], int)})
    for r in rows:
        if r["batch_tokens"] in sizes and sizes.index(r["batch_tokens"]) < len(PAPER):
            r["paper_batch_tokens"], r["paper_bleu"], r["paper_nll"] = PAPER[
                sizes.index(r["batch_tokens"])
            ]
    rows.sort(
        key=lambda r: (r["batch_tokens"] or 0, r["seed"] if r["seed"] is not None else -1, r["job"])
    )
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch size (ok jobs only): BLEU and NLL over seeds, the paper's values beside."""
    ok = [r for r in rows if r["status"] == "ok" and r["bleu"] is not None]
    out = []
    for size in sorted({r["batch_tokens"] for r in ok}):
        rs = [r for r in ok if r["batch_tokens"] == size]
        out.append(
            {
                "batch_tokens": size,
                "M": rs[0]["M"],
                "seeds": sorted(r["seed"] for r in rs),
                "bleu": stat([r["bleu"] for r in rs]),
                "nll": stat([r["nll"] for r in rs]),
                "paper": (rs[0]["paper_batch_tokens"], rs[0]["paper_bleu"], rs[0]["paper_nll"]),
            }
        )
    return out


def _verdicts(summary: Sequence[dict[str, Any]]) -> list[str]:
    labels = [f"{s['batch_tokens']:,}" for s in summary]
    bleu_text, bleu_ok = describe_trend([s["bleu"] for s in summary], labels, "BLEU", True)
    nll_text, nll_ok = describe_trend([s["nll"] for s in summary], labels, "NLL", False)
    lines = [f"- {bleu_text}", f"- {nll_text}"]
    for metric, ok in (("BLEU", bleu_ok), ("NLL", nll_ok)):
        word = {
            True: "reproduced, beyond the seed noise",
            False: "not reproduced (the opposite, beyond the noise)",
            None: "not shown beyond the seed noise",
        }[ok]
        lines.append(f"- **The paper's {metric} trend (better with a bigger batch): {word}.**")
    return lines


def _markdown(
    rows: Sequence[dict[str, Any]], summary: Sequence[dict[str, Any]], header: str
) -> str:
    head = [
        "# Table 5 — batch size (tokens) vs BLEU and NLL",
        "",
        header,
        "",
        "| batch (tokens) | M | seeds | BLEU (measured) | NLL / token (measured) | paper batch | paper BLEU "
        "| paper NLL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        pb, pbleu, pnll = s["paper"]
        head.append(
            f"| {s['batch_tokens']:,} | {s['M']} | {len(s['seeds'])} | {s['bleu'].text()} | "
            f"{s['nll'].text(3)} | {pb or '—'} | {pbleu or '—'} | {pnll or '—'} |"
        )
    ok = [r for r in rows if r["status"] == "ok"]
    same = {
        c: sorted({str(r[c]) for r in ok})
        for c in ("model", "params", "corpus", "steps", "lr", "K", "micro_batch_tokens")
    }
    settings = ", ".join(f"{c} {'/'.join(v)}" for c, v in same.items())
    ratios = [
        float(str(s["paper"][0]).replace("K", "e3").replace("M", "e6")) / s["batch_tokens"]
        for s in summary
        if s["paper"][0]
    ]
    head += [
        "",
        "Mean ± sample standard deviation over seeds. Ours: test split (BLEU on the first "
        "`train.eval_limit` sentences, greedy decoding; NLL per target token over the whole split). "
        f"Every job: {settings}: the same updates and "
        "optimiser settings, only M (so the batch) differs."
        + (
            f" The paper's: German->English, Transformer-Big, batches {min(ratios):,.0f}-{max(ratios):,.0f}x "
            "ours."
            if ratios
            else ""
        ),
        "",
        "## Did the trend reproduce? (computed by `gpipe_repro.report.noise`)",
        "",
        *_verdicts(summary),
        "",
        "Rule: a step counts as beyond the seed noise when the means differ by more than 2 standard "
        "errors of the difference (Welch).",
        "",
        "## Every job",
        "",
        "| job | status | batch | M | seed | BLEU | NLL | last train loss | tokens/s | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = lambda v, d=2: "—" if v is None else f"{v:.{d}f}"  # noqa: E731
        head.append(
            f"| {r['job']} | {r['status']} | {r['batch_tokens']} | {r['M']} | {r['seed']} | {f(r['bleu'])} | "
            f"{f(r['nll'], 3)} | {f(r['final_train_loss'], 3)} | {f(r['tokens_per_s'], 0)} | "
            f"{(r['error'] or '').replace('|', '/')[:80]} |"
        )
    sigs = sorted({r["bleu_signature"] for r in rows if r["bleu_signature"]})
    head += ["", f"sacrebleu signature: `{'`, `'.join(sigs) or '—'}`", ""]
    return "\n".join(head)


def _plot(summary: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ok = [r for r in rows if r["status"] == "ok" and r["bleu"] is not None]
    xs = [s["batch_tokens"] for s in summary]
    for ax, key, label in ((axes[0], "bleu", "BLEU"), (axes[1], "nll", "NLL per target token")):
        ax.scatter(
            [r["batch_tokens"] for r in ok], [r[key] for r in ok], s=12, c="0.6", label="one seed"
        )
        st: list[Stat] = [s[key] for s in summary]
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
    px = [260e3, 1e6, 4e6]
    axes[2].plot(px, [p[1] for p in PAPER], "s-", color="C2", label="BLEU")
    twin = axes[2].twinx()
    twin.plot(px, [p[2] for p in PAPER], "^--", color="C3", label="NLL")
    axes[2].set(
        xscale="log", xlabel="batch (tokens)", ylabel="BLEU", title="paper (Table 5, de->en)"
    )
    twin.set_ylabel("NLL")
    axes[2].set_xticks(px, [p[0] for p in PAPER])
    axes[2].minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(sweep: Path, out: Path, header: str = "") -> dict[str, Path]:
    """results.csv, table5.md and table5.png for the sweep folder ``sweep``, in ``out``."""
    rows = load_rows(sweep)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "md": out / "table5.md", "png": out / "table5.png"}
    with paths["csv"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    summary = summarise(rows)
    paths["md"].write_text(_markdown(rows, summary, header or f"Generated from `{sweep}`."))
    _plot(summary, rows, paths["png"])
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpipe_repro.report.table5", description=__doc__.splitlines()[0]
    )
    ap.add_argument("sweep", type=Path, help="a table5 sweep folder (multirun/<date>/<time>)")
    ap.add_argument(
        "--out", type=Path, default=None, help="where to write (default: <sweep>/report)"
    )
    args = ap.parse_args(argv)
    if not any(args.sweep.glob("*/metrics.json")):
        print(f"table5: error: no */metrics.json under {args.sweep}", file=sys.stderr)
        return 1
    command = f"python -m gpipe_repro.report.table5 {args.sweep}"
    paths = write(
        args.sweep, args.out or args.sweep / "report", hardware_header(args.sweep, command)
    )
    print(paths["md"].read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
