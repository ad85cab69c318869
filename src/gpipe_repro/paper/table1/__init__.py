"""Table 1 (GPipe §3): the largest model that fits, per number of accelerators.

Experiments: ``memory.table1.COLUMNS`` — the paper's configurations — each planned at fp32 and bf16;
a variant changes the budgets, the batches or the columns from the command line (never published).
Collect: ``planned.result_rows``, ``planned.saved_rows`` and ``planned.alloc_rows`` (``results.csv``,
``saved.csv``, ``allocator.csv``). Summary: ``findings``. Page: ``templates/table1.md.j2`` and
``table1.png``, from the CSVs alone.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from ...memory.table1 import COLUMNS, Column, GiB
from ...studies.table1 import AllocRow, ResultRow, SavedRow, alloc_rows, result_rows, saved_rows
from ...typed_csv import read_csv, write_csv
from ..artefact import Artefact, Report
from ..claims import LEAD, answers
from ..plot import figure
from ..provenance import Provenance
from ..template import render
from .findings import KINDS, kind, kind_label, paper, summary

TITLE = "Table 1 — the largest model that fits, per number of accelerators"
HALVES = {"amoebanet_d": "amoebanet", "transformer_lm": "transformer"}


def _key(c: Column) -> str:
    return f"{HALVES[c.model]}:{c.label}"


class Table1(Artefact[ResultRow]):
    """Table 1: the largest model that fits, per number of accelerators (GPipe §3)."""

    name = folder = "table1"
    row = ResultRow
    command = "make table1"
    siblings = ("saved.csv", "allocator.csv")

    def options(self, parser: argparse.ArgumentParser) -> None:
        for half, gib, batch in (("amoebanet", 8, "128"), ("transformer", 16, "32 x 1024 tokens")):
            parser.add_argument(
                f"--{half}-budget-gib", type=float, help=f"memory per accelerator (default {gib})"
            )
            parser.add_argument(f"--{half}-batch", type=int, help=f"mini-batch (default {batch})")
        parser.add_argument(
            "--columns", nargs="*", help="a subset, e.g. transformer:Pipeline-8 amoebanet:Naive-1"
        )

    def check(self, a: argparse.Namespace) -> str | None:
        for half in ("amoebanet", "transformer"):
            b, n = getattr(a, f"{half}_budget_gib"), getattr(a, f"{half}_batch")
            if b is not None and b <= 0:
                return f"--{half}-budget-gib={b} is invalid; allowed: a number of GiB > 0"
            if n is not None and (n < 1 or n & (n - 1)):
                return f"--{half}-batch={n} is invalid; allowed: a power of two >= 1 (it is split into M micro-batches)"
        known = {_key(c) for c in COLUMNS}
        bad = [c for c in a.columns or [] if c not in known]
        return (
            f"--columns {bad[0]} is unknown; allowed: {', '.join(sorted(known))}" if bad else None
        )

    def variant(self, a: argparse.Namespace) -> str | None:
        """What this invocation changes from the paper's setting, as a folder name."""
        keys = [f"{h}_{what}" for what in ("budget_gib", "batch") for h in HALVES.values()]
        parts = [
            f"{k}-{v:g}" if isinstance(v, float) else f"{k}-{v}"
            for k in keys
            if (v := getattr(a, k, None)) is not None
        ]
        if getattr(a, "columns", None):
            parts.append("columns-" + "+".join(c.replace(":", "-") for c in a.columns))
        return "_".join(parts) or None

    def columns(self, a: argparse.Namespace) -> list[Column]:
        """The paper's columns, with the budgets, batches and column filter of the command line."""
        cols = []
        for c in COLUMNS:
            if getattr(a, "columns", None) and _key(c) not in a.columns:
                continue
            budget = getattr(a, f"{HALVES[c.model]}_budget_gib", None)
            batch = getattr(a, f"{HALVES[c.model]}_batch", None)
            M = c.M if batch is None else min(c.M, batch)
            budget_bytes = int(budget * GiB) if budget else c.budget
            cols.append(replace(c, budget=budget_bytes, batch=batch or c.batch, M=M))
        return cols

    def collect(
        self, source: Path | None, opts: argparse.Namespace, out: Path
    ) -> Report[ResultRow]:
        cols = self.columns(opts)
        write_csv(out / "saved.csv", SavedRow, saved_rows(cols))
        write_csv(out / "allocator.csv", AllocRow, alloc_rows())
        return Report(result_rows(cols), Provenance.here())

    def render(self, report: Report[ResultRow], out: Path) -> list[Path]:
        md, png = out / "table1.md", out / "table1.png"
        saved = read_csv(out / "saved.csv", SavedRow)
        has_alloc = (out / "allocator.csv").exists()
        alloc = read_csv(out / "allocator.csv", AllocRow) if has_alloc else []
        s = summary(report.rows, saved, alloc)
        md.write_text(render("table1", report.provenance, TITLE, answers("table1", out), LEAD, **s))
        plot(report.rows, png)
        return [md, png]


def plot(rs: list[ResultRow], path: Path) -> None:
    with figure(path, 1, 2, figsize=(10, 3.8)) as (fig, axes):
        for ax, model, title in [
            (axes[0], "amoebanet_d", "AmoebaNet-D (8 GiB / accelerator)"),
            (axes[1], "transformer_lm", "Transformer-L (16 GiB / accelerator)"),
        ]:
            sub = [r for r in rs if r.model == model and kind(r) == ("fp32", "eager")]
            xs = list(range(len(sub)))
            ax.plot(xs, [paper(model, r.column, "parameters") for r in sub], "s--", label="paper")
            for k, style in zip(KINDS, ("o-", "^-", "o:", "^:")):
                ours = {r.column: r.largest_param_count or 0 for r in rs if r.model == model and kind(r) == k}  # fmt: skip
                if ours:
                    ax.plot(xs, [ours.get(r.column, 0) for r in sub], style,
                            label=f"ours, {kind_label(*k)}: largest that fits")  # fmt: skip
            ax.set_xticks(xs, [r.column for r in sub], rotation=20)
            ax.set(yscale="log", ylabel="parameters", title=title)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)


ARTEFACT = Table1()
