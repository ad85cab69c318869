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

__all__ = ["COLUMNS", "load_rows", "write_report", "markdown_table", "console_table", "series"]

COLUMNS = [
    "job",
    "status",
    "source",
    "hardware",
    "model",
    "K",
    "M",
    "checkpoint",
    "schedule",
    "replicas",
    "balance",
    "batch_size",
    "batch_mode",
    "micro_batch",
    "param_count",
    "throughput",
    "normalized_throughput",
    "speedup_vs_k1",
    "speedup_ideal",
    "tokens_per_s",
    "step_time_s",
    "predicted_step_time_s",
    "predicted_throughput",
    "bubble_fraction",
    "bubble_ideal",
    "stage_busy_s",
    "max_stage_memory_bytes",
    "stage_memory_bytes",
    "memory_source",
    "fits_memory",
    "eval_accuracy",
    "final_loss",
    "error",
]


def _row(job: str, m: dict[str, Any]) -> dict[str, Any]:
    pipe = m.get("pipeline") or {}
    stages = m.get("stages") or []
    mem = [s.get("peak_memory_bytes") for s in stages]
    ev = m.get("eval") or {}
    losses = m.get("losses") or []
    hw = m.get("hardware") or {}
    batch, M = m.get("batch_size"), pipe.get("M")
    replicas = pipe.get("replicas") or 1
    return {
        "job": job,
        "status": m.get("status"),
        "source": m.get("source"),
        "hardware": hw.get("name") or ((m.get("env") or {}).get("device_names") or [None])[0],
        "model": (m.get("model") or {}).get("name"),
        "K": pipe.get("K"),
        "M": M,
        "checkpoint": pipe.get("checkpoint"),
        "schedule": pipe.get("schedule"),
        "replicas": pipe.get("replicas"),
        "balance": "-".join(str(b) for b in pipe.get("balance") or []) or None,
        "batch_size": batch,
        "batch_mode": m.get("batch_mode"),
        "micro_batch": batch // M // replicas
        if isinstance(batch, int) and isinstance(M, int) and M
        else None,
        "param_count": (m.get("model") or {}).get("param_count"),
        "throughput": m.get("throughput"),
        "normalized_throughput": None,
        "speedup_vs_k1": None,
        "speedup_ideal": None,
        "tokens_per_s": m.get("tokens_per_s"),
        "step_time_s": m.get("step_time_s"),
        "predicted_step_time_s": m.get("predicted_step_time_s"),
        "predicted_throughput": m.get("predicted_throughput"),
        "bubble_fraction": m.get("bubble_fraction"),
        "bubble_ideal": m.get("bubble_ideal"),
        "stage_busy_s": ";".join(f"{s.get('busy_s', 0.0):.6g}" for s in stages) or None,
        "max_stage_memory_bytes": max(mem) if mem else None,
        "stage_memory_bytes": ";".join(str(x) for x in mem) or None,
        "memory_source": stages[0].get("memory_source") if stages else None,
        "fits_memory": hw.get("fits_memory"),
        "eval_accuracy": ev.get("accuracy"),
        "final_loss": losses[-1] if losses else None,
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
    rows.sort(
        key=lambda r: (
            r["K"] if isinstance(r["K"], int) else 10**9,
            r["M"] if isinstance(r["M"], int) else 10**9,
            r["job"],
        )
    )
    ok = [r for r in rows if r["status"] == "ok" and r["throughput"]]
    # Normalised to the smallest (K, M) that ran, as the paper's Table 2 does, within each series: one
    # model on one hardware with one batch mode.
    for key in {series(r) for r in ok}:
        group = [r for r in ok if series(r) == key]
        base = min(group, key=lambda r: (r["K"], r["M"]))["throughput"]
        for r in group:
            r["normalized_throughput"] = r["throughput"] / base
    # Against K = 1 at the same M (and schedule, remat, series), where the sweep has it: the pipeline's
    # speed-up, beside GPipe's ideal K*M/(M+K-1) (§2.3: only the bubble is lost).
    for r in ok:
        same = [
            q
            for q in ok
            if q["K"] == 1
            and q["M"] == r["M"]
            and series(q) == series(r)
            and (q["schedule"], q["checkpoint"]) == (r["schedule"], r["checkpoint"])
        ]
        if same and isinstance(r["K"], int) and isinstance(r["M"], int):
            r["speedup_vs_k1"] = r["throughput"] / same[0]["throughput"]
            r["speedup_ideal"] = r["K"] * r["M"] / (r["M"] + r["K"] - 1)
    return rows


def series(r: dict[str, Any]) -> tuple[str, str, str]:
    """What a row's throughput is comparable with: its model, hardware and batch mode."""
    return str(r.get("model")), str(r.get("hardware")), str(r.get("batch_mode"))


def _fmt(v: Any, col: str) -> str:
    if v is None:
        return "—"
    if col in ("throughput", "predicted_throughput"):
        return f"{v:.1f}"
    if col in (
        "bubble_fraction",
        "bubble_ideal",
        "eval_accuracy",
        "normalized_throughput",
        "speedup_vs_k1",
        "speedup_ideal",
    ):
        return f"{v:.3f}"
    if col == "final_loss":
        return f"{v:.6f}"
    if col in ("step_time_s", "predicted_step_time_s"):
        return f"{v * 1e3:.1f} ms"
    if col == "stage_memory_bytes":
        return " / ".join(f"{int(x) / 2**20:.1f}" for x in str(v).split(";"))
    return str(v)


TABLE_COLS = [
    ("K", "K"),
    ("M", "M"),
    ("checkpoint", "remat"),
    ("schedule", "schedule"),
    ("source", "source"),
    ("hardware", "hardware"),
    ("batch_mode", "batch mode"),
    ("status", "status"),
    ("throughput", "samples/s"),
    ("predicted_throughput", "predicted samples/s"),
    ("normalized_throughput", "normalised"),
    ("speedup_vs_k1", "speed-up vs K=1"),
    ("speedup_ideal", "K·M/(M+K-1)"),
    ("bubble_fraction", "bubble"),
    ("bubble_ideal", "(K-1)/(M+K-1)"),
    ("stage_memory_bytes", "memory/stage MiB"),
    ("eval_accuracy", "accuracy"),
    ("final_loss", "final loss"),
    ("error", "error"),
]
# Shown only when some row has them (a simulated sweep, a train.predict sweep, a batch_mode sweep).
OPTIONAL = (
    "source",
    "hardware",
    "batch_mode",
    "predicted_throughput",
    "speedup_vs_k1",
    "speedup_ideal",
)


def _table_cols(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    def shown(col: str) -> bool:
        if col not in OPTIONAL:
            return True
        if col == "source":
            return any(r.get("source") == "simulated" for r in rows)
        if col == "hardware":
            return any(r.get("source") == "simulated" for r in rows)
        if col == "batch_mode":
            return any(r.get("batch_mode") not in (None, "fixed") for r in rows)
        return any(r.get(col) is not None for r in rows)

    return [c for c in TABLE_COLS if shown(c[0])]


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    cols = _table_cols(rows)
    head = "| " + " | ".join(h for _, h in cols) + " |"
    sep = "|" + "---|" * len(cols)
    body = [
        "| " + " | ".join(_fmt(r[c], c).replace("|", "/") for c, _ in cols) + " |" for r in rows
    ]
    return "\n".join([head, sep, *body])


def console_table(rows: Sequence[dict[str, Any]]) -> str:
    cols = [c for c in _table_cols(rows) if c[0] not in ("checkpoint", "schedule")]
    cells = [[h for _, h in cols]] + [[_fmt(r[c], c)[:60] for c, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ok = [r for r in rows if r["status"] == "ok"]
    keys = sorted({series(r) for r in ok})
    for key in keys:
        tag = "" if len(keys) == 1 else " " + "/".join(key[1:])
        for K in sorted({r["K"] for r in ok if series(r) == key}):
            rs = sorted((r for r in ok if r["K"] == K and series(r) == key), key=lambda r: r["M"])
            what = "simulated" if rs[0].get("source") == "simulated" else "measured"
            axes[0].plot(
                [r["M"] for r in rs], [r["throughput"] for r in rs], "o-", label=f"K={K}{tag}"
            )
            axes[1].plot(
                [r["M"] for r in rs],
                [r["bubble_fraction"] for r in rs],
                "o-",
                label=f"K={K}{tag} {what}",
            )
            axes[1].plot([r["M"] for r in rs], [r["bubble_ideal"] for r in rs], "k:", alpha=0.5)
    axes[0].set(xlabel="micro-batches M", ylabel="samples / s", title="throughput", xscale="log")
    axes[1].set(
        xlabel="micro-batches M",
        ylabel="idle share",
        title="bubble (dotted: (K-1)/(M+K-1))",
        xscale="log",
    )
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


def write_report(
    rows: Sequence[dict[str, Any]], out: Path, title: str, header: str = ""
) -> dict[str, Path]:
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

    ap = argparse.ArgumentParser(
        prog="python -m gpipe_repro.report.gather",
        description="Rebuild results.csv/.md/.png of a sweep folder from its jobs' metrics.json.",
    )
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
    paths = write_report(
        rows, args.sweep, args.title or args.sweep.name, f"Gathered from `{args.sweep}`."
    )
    print(console_table(rows))
    print(f"table: {paths['md']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
