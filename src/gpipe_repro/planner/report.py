"""``make table1``: the paper's Table 1 beside ours -> reports/table1/{results.csv, saved.csv, table1.md, table1.png}.

    python -m gpipe_repro.planner.report --out reports/table1

Every column is planned twice, with the engine's fp32 and bf16 precisions (``train.precision``);
``saved.csv`` breaks the Naive-1 columns' saved activations down by layer type, operation and dtype
(``planner.breakdown``). ``table1.md`` and the plot are generated from the two csv files alone.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import get_args, get_type_hints

from ..engine.precision import PRECISIONS
from .breakdown import amoebanet_groups, transformer_groups
from .table1 import COLUMNS, Column, GiB, largest, plan_column
from .table1_text import markdown


@dataclass
class ResultRow:
    """One row of ``results.csv``: a Table 1 column planned at one precision (ours beside the paper's)."""

    model: str
    column: str
    precision: str
    K: int
    M: int
    batch: int
    schedule: str
    checkpoint: str
    L: int
    D: int | None
    param_count: int
    paper_param_count: int
    param_memory_bytes: int
    paper_param_memory_bytes: int
    activation_bytes: int
    paper_activation_bytes: int
    weight_copy_bytes: int
    max_stage_activation_bytes: int
    max_stage_total_bytes: int
    budget_bytes: int
    fits: bool
    balance: str
    largest_L: int | None
    largest_D: int | None
    largest_param_count: int | None
    largest_max_stage_total_bytes: int | None
    note: str


@dataclass
class SavedRow:
    """One row of ``saved.csv``: saved activation bytes of one layer type, operation and dtype."""

    model: str
    column: str
    precision: str
    layer_type: str
    kind: str
    dtype: str
    bytes: int


FIELDS = [f.name for f in fields(ResultRow)]
SAVED_FIELDS = [f.name for f in fields(SavedRow)]


def _kinds(*row_types: type) -> tuple[set[str], set[str]]:
    """The int and the bool columns of the rows' dataclasses (how ``read_csv`` types a cell)."""
    ints, bools = set(), set()
    for t in row_types:
        for name, ann in get_type_hints(t).items():
            base = set(get_args(ann)) - {type(None)} or {ann}
            if base == {int}:
                ints.add(name)
            elif base == {bool}:
                bools.add(name)
    return ints, bools


INT_FIELDS, BOOL_FIELDS = _kinds(ResultRow, SavedRow)


def rows(columns: list[Column] | None = None) -> list[dict]:
    return [_row(c, precision) for c in columns or COLUMNS for precision in PRECISIONS]


def saved_rows(columns: list[Column] | None = None) -> list[dict]:
    """The Naive-1 columns' saved activations by layer type, operation and dtype (``saved.csv``)."""
    out = []
    for c in columns or COLUMNS:
        if c.label != "Naive-1":
            continue
        L, D = c.size
        for precision in PRECISIONS:
            n = c.batch / c.M
            groups = (
                amoebanet_groups(L, D, n, precision)
                if c.model == "amoebanet_d"
                else transformer_groups(L, n, precision)
            )
            out += [
                asdict(
                    SavedRow(c.model, c.label, precision, g.layer_type, g.kind, g.dtype, g.nbytes)
                )
                for g in groups
            ]
    return out


def _row(c: Column, precision: str) -> dict:
    t0 = time.perf_counter()
    p = plan_column(c, precision=precision)
    best = largest(c, precision)
    L, D = c.size
    row = ResultRow(
        model=c.model,
        column=c.label,
        precision=precision,
        K=c.K,
        M=c.M,
        batch=c.batch,
        schedule=c.schedule,
        checkpoint=c.checkpoint,
        L=L,
        D=D or None,
        param_count=p.param_count,
        paper_param_count=round(c.paper_params),
        param_memory_bytes=sum(p.state),
        paper_param_memory_bytes=round(c.paper_param_mem),
        activation_bytes=sum(p.activation),
        paper_activation_bytes=round(c.paper_act_mem),
        weight_copy_bytes=sum(p.weight_copies),
        max_stage_activation_bytes=max(p.activation),
        max_stage_total_bytes=max(p.totals),
        budget_bytes=c.budget,
        fits=p.fits,
        balance="-".join(map(str, p.balance)),
        largest_L=best[0][0] if best else None,
        largest_D=(best[0][1] or None) if best else None,
        largest_param_count=best[1].param_count if best else None,
        largest_max_stage_total_bytes=max(best[1].totals) if best else None,
        note=p.oversized or ("" if p.fits else "the paper's size does not fit this budget"),
    )
    print(
        f"{c.model:15s} {c.label:13s} {precision} planned in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    return asdict(row)


def _write_csv(path: Path, fields: list[str], rs: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rs)


def read_csv(path: Path) -> list[dict]:
    """results.csv or saved.csv back into typed rows (empty cells are None)."""
    rows = []
    for raw in csv.DictReader(path.open()):
        r: dict = {}
        for k, v in raw.items():
            if k in INT_FIELDS:
                r[k] = int(v) if v != "" else None
            elif k in BOOL_FIELDS:
                r[k] = v == "True"
            else:
                r[k] = v
        rows.append(r)
    return rows


def plot(rs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, model, title in [
        (axes[0], "amoebanet_d", "AmoebaNet-D (8 GiB / accelerator)"),
        (axes[1], "transformer_lm", "Transformer-L (16 GiB / accelerator)"),
    ]:
        sub = [r for r in rs if r["model"] == model and r["precision"] == "fp32"]
        xs = list(range(len(sub)))
        ax.plot(xs, [r["paper_param_count"] for r in sub], "s--", label="paper")
        for precision, style in (("fp32", "o-"), ("bf16", "^-")):
            ours = {
                r["column"]: r for r in rs if r["model"] == model and r["precision"] == precision
            }
            if ours:
                ax.plot(
                    xs,
                    [
                        (ours[r["column"]]["largest_param_count"] or 0)
                        if r["column"] in ours
                        else 0
                        for r in sub
                    ],
                    style,
                    label=f"ours, {precision}: largest that fits",
                )
        ax.set_xticks(xs, [r["column"] for r in sub], rotation=20)
        ax.set(yscale="log", ylabel="parameters", title=title)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def columns_from_args(a: argparse.Namespace) -> list[Column]:
    """The paper's columns, with the budgets, batches and column filter given on the command line."""
    cols = []
    for c in COLUMNS:
        half = "amoebanet" if c.model == "amoebanet_d" else "transformer"
        budget, batch = getattr(a, f"{half}_budget_gib"), getattr(a, f"{half}_batch")
        if a.columns and f"{half}:{c.label}" not in a.columns:
            continue
        M = c.M if batch is None else min(c.M, batch)
        cols.append(
            replace(
                c, budget=int(budget * GiB) if budget else c.budget, batch=batch or c.batch, M=M
            )
        )
    return cols


def check_args(a: argparse.Namespace) -> str | None:
    for half in ("amoebanet", "transformer"):
        b, n = getattr(a, f"{half}_budget_gib"), getattr(a, f"{half}_batch")
        if b is not None and b <= 0:
            return f"--{half}-budget-gib={b} is invalid; allowed: a number of GiB > 0"
        if n is not None and (n < 1 or n & (n - 1)):
            return f"--{half}-batch={n} is invalid; allowed: a power of two >= 1 (it is split into M micro-batches)"
    known = {
        f"{'amoebanet' if c.model == 'amoebanet_d' else 'transformer'}:{c.label}" for c in COLUMNS
    }
    bad = [c for c in a.columns or [] if c not in known]
    if bad:
        return f"--columns {bad[0]} is unknown; allowed: {', '.join(sorted(known))}"
    return None


CANONICAL = Path("reports/table1")


def _variant(a: argparse.Namespace) -> str:
    """A folder name for what this invocation changes from the paper's setting ("paper": nothing)."""
    parts = [
        f"{k}-{v:g}" if isinstance(v, float) else f"{k}-{v}"
        for k, v in (
            ("amoebanet_budget_gib", a.amoebanet_budget_gib),
            ("transformer_budget_gib", a.transformer_budget_gib),
            ("amoebanet_batch", a.amoebanet_batch),
            ("transformer_batch", a.transformer_batch),
        )
        if v is not None
    ]
    if a.columns:
        parts.append("columns-" + "+".join(c.replace(":", "-") for c in a.columns))
    return "_".join(parts) or "paper"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.planner.report")
    ap.add_argument(
        "--out",
        default=None,
        help="the report's folder (default: outputs/table1/<what differs "
        "from the paper's setting>); reports/table1 is `make table1`'s alone",
    )
    ap.add_argument(
        "--amoebanet-budget-gib",
        type=float,
        default=None,
        help="memory per accelerator (default 8)",
    )
    ap.add_argument(
        "--transformer-budget-gib",
        type=float,
        default=None,
        help="memory per accelerator (default 16)",
    )
    ap.add_argument("--amoebanet-batch", type=int, default=None, help="mini-batch (default 128)")
    ap.add_argument(
        "--transformer-batch",
        type=int,
        default=None,
        help="mini-batch of 1024-token sequences (default 32)",
    )
    ap.add_argument(
        "--columns", nargs="*", help="a subset, e.g. transformer:Pipeline-8 amoebanet:Naive-1"
    )
    ap.add_argument(
        "--from-csv",
        action="store_true",
        help="regenerate table1.md and the plot from OUT/results.csv",
    )
    a = ap.parse_args(argv)
    err = check_args(a)
    variant = _variant(a)
    if (
        err is None
        and a.out is not None
        and Path(a.out).resolve() == CANONICAL.resolve()
        and variant != "paper"
    ):
        err = (
            f"--out {a.out} is the committed report of `make table1` (the paper's setting); this run changes "
            f"{variant.replace('_', ' ')}: leave --out out to write to outputs/table1/{variant}"
        )
    if err:
        print(f"table1: error: {err}", file=sys.stderr)
        sys.exit(2)
    out = Path(a.out) if a.out is not None else Path("outputs/table1") / variant
    out.mkdir(parents=True, exist_ok=True)
    if not a.from_csv:
        cols = columns_from_args(a)
        _write_csv(out / "results.csv", FIELDS, rows(cols))
        _write_csv(out / "saved.csv", SAVED_FIELDS, saved_rows(cols))
    else:
        missing = [n for n in ("results.csv", "saved.csv") if not (out / n).exists()]
        if missing:
            print(
                f"table1: error: --from-csv needs {out / missing[0]}; run without --from-csv first",
                file=sys.stderr,
            )
            sys.exit(2)
    rs = read_csv(out / "results.csv")  # the table is generated from the csv files
    (out / "table1.md").write_text(markdown(rs, read_csv(out / "saved.csv")))
    plot(rs, out / "table1.png")
    print(f"report: {out / 'table1.md'}")


if __name__ == "__main__":
    main()
