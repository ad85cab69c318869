"""The validation's error by what users decide (remat, schedule), per (model, K, remat) and per M.

Issue #21's target is a *bias* target: in every (model, K, remat) group the median signed error
within ±5% (bias distorts a table; noise averages out). A group whose bias is smaller than its
cells' repeat spread (``CellRow.round_spread``) cannot be told from this machine's noise and says
so instead of "met". The rows are written to ``split.csv`` and ``groups.csv`` and the page reads
them back (``summary``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...measure.simulator import VARIANTS, CellRow
from ...typed_csv import read_csv, write_csv
from ..stats import median

BIAS = 0.05  # issue #21: every (model, K, remat) group's median signed error within ±5%
NOISE = "inside this machine's noise"
KINDS = ("real", "emulated")
ALL = "all"  # a split row over every schedule


@dataclass
class SplitRow:
    """The error of one kind's cells with one remat and one schedule (``all``: every schedule)."""

    kind: str
    checkpoint: str
    schedule: str
    cells: int
    median_signed: float
    median_abs: float
    max_abs: float


@dataclass
class GroupRow:
    """One (model, K, remat) group of one kind: its bias against the ±5% target and its noise."""

    kind: str
    model: str
    K: int
    checkpoint: str
    cells: int
    median_signed: float
    median_abs: float
    max_abs: float
    repeat_spread: float | None  # median over its cells of the rounds' spread (None: one round)
    outside: bool  # |median signed| > BIAS
    verdict: str  # met | not met | NOISE


def verdict(bias: float, spread: float | None) -> str:
    """A group's bias against the target: ``NOISE`` where it is smaller than the same cell's
    repeat spread (nothing can be shown below that), else met or not met."""
    if spread is not None and abs(bias) < spread:
        return NOISE
    return "met" if abs(bias) <= BIAS else "not met"


def _errors(rs: Sequence[CellRow]) -> tuple[int, float, float, float]:
    errs = [float(r.rel_error) for r in rs]
    absolute = [abs(e) for e in errs]
    return len(errs), statistics.median(errs), statistics.median(absolute), max(absolute)


def split_rows(rows: Sequence[CellRow]) -> list[SplitRow]:
    """Per kind x remat x (every schedule, then each): the cells' error."""
    out = []
    for kind in KINDS:
        ks = [r for r in rows if r.kind == kind]
        for ck in sorted({r.checkpoint for r in ks}):
            cs = [r for r in ks if r.checkpoint == ck]
            for sc in [ALL, *sorted({r.schedule for r in cs})]:
                rs = [r for r in cs if sc in (ALL, r.schedule)]
                out.append(SplitRow(kind, ck, sc, *_errors(rs)))
    return out


def group_rows(rows: Sequence[CellRow]) -> list[GroupRow]:
    """Per kind, model, K and remat: the bias, the repeat spread beside it and the verdict."""
    keys = sorted(
        {(r.kind, r.model, r.K, r.checkpoint) for r in rows},
        key=lambda k: (KINDS.index(k[0]) if k[0] in KINDS else len(KINDS), k[1], k[2], k[3]),
    )
    out = []
    for kind, model, K, ck in keys:
        rs = [r for r in rows if (r.kind, r.model, r.K, r.checkpoint) == (kind, model, K, ck)]
        n, signed, med_abs, max_abs = _errors(rs)
        spreads = [float(r.round_spread) for r in rs if r.round_spread is not None]
        spread = median(spreads)
        v = verdict(signed, spread)
        out.append(
            GroupRow(kind, model, K, ck, n, signed, med_abs, max_abs, spread, abs(signed) > BIAS, v)
        )
    return out


def verdicts(groups: Sequence[GroupRow]) -> list[dict[str, Any]]:
    """Per kind: the bias target over its groups (not met where one misses it, met where all meet
    it, else not shown inside the noise) and its groups by verdict (worded by
    ``templates/sim_lines.md.j2``)."""
    out = []
    for kind in KINDS:
        gs = [g for g in groups if g.kind == kind]
        if not gs:
            continue
        by = {v: [g for g in gs if g.verdict == v] for v in ("met", "not met", NOISE)}
        target = "met" if len(by["met"]) == len(gs) else f"not shown ({NOISE})"
        out.append({"kind": kind, "target": "not met" if by["not met"] else target,
                    "groups": len(gs), "by": by, "outside": sum(g.outside for g in gs)})  # fmt: skip
    return out


def by_m(rows: Sequence[CellRow]) -> list[dict[str, Any]]:
    """Per kind and M, over the cells of two stages or more: the micro-batch sizes (smallest,
    largest), the error, and the median share of the simulated step that posting sends and receives
    takes (``posting``: one minus the step simulated with posting free, ``simulated_no_calls_s``,
    over the step; None where no cell has it)."""
    out = []
    for kind in KINDS:
        ks = [r for r in rows if r.kind == kind and r.K >= 2]
        for M in sorted({r.M for r in ks}):
            rs = [r for r in ks if r.M == M]
            n, signed, med_abs, max_abs = _errors(rs)
            mbs = [r.micro_batch for r in rs]
            shares = [
                1 - float(r.simulated_no_calls_s) / float(r.simulated_step_s)
                for r in rs
                if r.simulated_no_calls_s is not None and r.simulated_step_s
            ]
            out.append({"kind": kind, "M": M, "micro_batch": (min(mbs), max(mbs)), "cells": n,
                        "median_signed": signed, "median_abs": med_abs, "max_abs": max_abs,
                        "posting": median(shares)})  # fmt: skip
    return out


def summary(rows: Sequence[CellRow], out: Path) -> dict[str, Any]:
    """Write ``split.csv`` and ``groups.csv`` from ``rows`` into ``out``; their rows read back and
    the verdicts from them (the tables: ``templates/sim.md.j2``)."""
    write_csv(out / "split.csv", SplitRow, split_rows(rows))
    write_csv(out / "groups.csv", GroupRow, group_rows(rows))
    splits, groups = read_csv(out / "split.csv", SplitRow), read_csv(out / "groups.csv", GroupRow)
    return {
        "all": ALL, "bias": BIAS, "noise": NOISE, "splits": splits, "groups": groups,
        "verdicts": verdicts(groups), "by_m": by_m(rows), "no_calls": VARIANTS["no_calls"],
    }  # fmt: skip
