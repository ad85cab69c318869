"""Gather a sweep's ``metrics.json`` files into results.csv, a markdown table and a PNG plot.

Hydra 1.3 gives ``on_multirun_end`` no job results, so the sweep folder is globbed. Failed jobs are
kept as failed rows with their one-line error. The same gathering rebuilds the table of any sweep
folder, also a partly finished one: ``python -m gpipe_repro.report.gather multirun/<date>/<time>``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "load_rows", "write_report", "markdown_table", "console_table"]

COLUMNS = ["job", "status", "source", "model", "K", "M", "checkpoint", "schedule", "replicas", "balance",
           "batch_size", "param_count", "throughput", "normalized_throughput", "step_time_s",
           "bubble_fraction", "bubble_ideal", "max_stage_memory_bytes", "stage_memory_bytes",
           "memory_source", "eval_accuracy", "final_loss", "error"]


def _row(job: str, m: dict[str, Any]) -> dict[str, Any]:
    pipe = m.get("pipeline") or {}
    stages = m.get("stages") or []
    mem = [s.get("peak_memory_bytes") for s in stages]
    ev = m.get("eval") or {}
    losses = m.get("losses") or []
    return {
        "job": job, "status": m.get("status"), "source": m.get("source"), "model": (m.get("model") or {}).get("name"),
        "K": pipe.get("K"), "M": pipe.get("M"), "checkpoint": pipe.get("checkpoint"),
        "schedule": pipe.get("schedule"), "replicas": pipe.get("replicas"),
        "balance": "-".join(str(b) for b in pipe.get("balance") or []) or None,
        "batch_size": m.get("batch_size"), "param_count": (m.get("model") or {}).get("param_count"),
        "throughput": m.get("throughput"), "normalized_throughput": None,
        "step_time_s": m.get("step_time_s"), "bubble_fraction": m.get("bubble_fraction"),
        "bubble_ideal": m.get("bubble_ideal"),
        "max_stage_memory_bytes": max(mem) if mem else None,
        "stage_memory_bytes": ";".join(str(x) for x in mem) or None,
        "memory_source": stages[0].get("memory_source") if stages else None,
        "eval_accuracy": ev.get("accuracy"), "final_loss": losses[-1] if losses else None,
        "error": m.get("error"),
    }


def load_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(sweep_dir.glob("*/metrics.json")):
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            m = {"status": "failed", "error": f"unreadable metrics.json: {err}"}
        rows.append(_row(path.parent.name, m))
    rows.sort(key=lambda r: (r["K"] if isinstance(r["K"], int) else 10**9,
                             r["M"] if isinstance(r["M"], int) else 10**9, r["job"]))
    ok = [r for r in rows if r["status"] == "ok" and r["throughput"]]
    if ok:  # normalised to the smallest (K, M) that ran, as the paper's Table 2 does
        base = min(ok, key=lambda r: (r["K"], r["M"]))["throughput"]
        for r in ok:
            r["normalized_throughput"] = r["throughput"] / base
    return rows


def _fmt(v: Any, col: str) -> str:
    if v is None:
        return "—"
    if col in ("throughput",):
        return f"{v:.1f}"
    if col in ("bubble_fraction", "bubble_ideal", "eval_accuracy", "normalized_throughput", "final_loss"):
        return f"{v:.3f}"
    if col == "step_time_s":
        return f"{v * 1e3:.1f} ms"
    if col == "stage_memory_bytes":
        return " / ".join(f"{int(x) / 2**20:.1f}" for x in str(v).split(";"))
    return str(v)


TABLE_COLS = [("K", "K"), ("M", "M"), ("checkpoint", "remat"), ("schedule", "schedule"),
              ("status", "status"), ("throughput", "samples/s"), ("normalized_throughput", "normalised"),
              ("bubble_fraction", "bubble"), ("bubble_ideal", "(K-1)/(M+K-1)"),
              ("stage_memory_bytes", "memory/stage MiB"), ("eval_accuracy", "accuracy"), ("error", "error")]


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    head = "| " + " | ".join(h for _, h in TABLE_COLS) + " |"
    sep = "|" + "---|" * len(TABLE_COLS)
    body = ["| " + " | ".join(_fmt(r[c], c).replace("|", "/") for c, _ in TABLE_COLS) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def console_table(rows: Sequence[dict[str, Any]]) -> str:
    cols = [c for c in TABLE_COLS if c[0] not in ("checkpoint", "schedule")]
    cells = [[h for _, h in cols]] + [[_fmt(r[c], c)[:60] for c, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ok = [r for r in rows if r["status"] == "ok"]
    for K in sorted({r["K"] for r in ok}):
        rs = sorted((r for r in ok if r["K"] == K), key=lambda r: r["M"])
        axes[0].plot([r["M"] for r in rs], [r["throughput"] for r in rs], "o-", label=f"K={K}")
        axes[1].plot([r["M"] for r in rs], [r["bubble_fraction"] for r in rs], "o-", label=f"K={K} measured")
        axes[1].plot([r["M"] for r in rs], [r["bubble_ideal"] for r in rs], "k:", alpha=0.5)
    axes[0].set(xlabel="micro-batches M", ylabel="samples / s", title="throughput", xscale="log")
    axes[1].set(xlabel="micro-batches M", ylabel="idle share", title="bubble (dotted: (K-1)/(M+K-1))", xscale="log")
    for ax in axes:
        Ms = sorted({r["M"] for r in ok})
        if Ms:
            ax.set_xticks(Ms, [str(m) for m in Ms])
            ax.minorticks_off()
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(rows: Sequence[dict[str, Any]], out: Path, title: str, header: str = "") -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "md": out / "results.md", "png": out / "results.png"}
    with paths["csv"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    paths["md"].write_text(f"# {title}\n\n{header}\n\n{markdown_table(rows)}\n")
    plot(rows, paths["png"], title)
    return paths


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.report.gather",
                                 description="Rebuild results.csv/.md/.png of a sweep folder from its jobs' metrics.json.")
    ap.add_argument("sweep", type=Path, help="the sweep folder (multirun/<date>/<time>)")
    ap.add_argument("--title", default=None, help="the report's title (default: the folder's name)")
    args = ap.parse_args(argv)
    if not args.sweep.is_dir():
        print(f"gather: error: {args.sweep} is not a folder", file=sys.stderr)
        return 2
    rows = load_rows(args.sweep)
    if not rows:
        print(f"gather: error: no */metrics.json under {args.sweep}", file=sys.stderr)
        return 1
    paths = write_report(rows, args.sweep, args.title or args.sweep.name, f"Gathered from `{args.sweep}`.")
    print(console_table(rows))
    print(f"table: {paths['md']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
