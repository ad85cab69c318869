"""The validation's error split by remat and schedule, and each (model, K, remat) group's bias verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpipe_repro.measure.simulator import CellRow
from gpipe_repro.paper.artefact import make
from gpipe_repro.paper.template import words
from gpipe_repro.paper.validate_sim import ARTEFACT
from gpipe_repro.paper.validate_sim.split import (
    NOISE,
    GroupRow,
    SplitRow,
    by_m,
    group_rows,
    split_rows,
    verdicts,
)
from gpipe_repro.typed_csv import read_csv, write_csv


def _cell(model: str, checkpoint: str, M: int, error: float, spread: float, **kw) -> CellRow:
    measured = 0.1
    simulated = measured * (1 + error)
    return CellRow(
        **{
            "model": model,
            "K": 2,
            "M": M,
            "schedule": "gpipe",
            "checkpoint": checkpoint,
            "kind": "real",
            "balance": "4-4",
            "micro_batch": 32 // M,
            "measured_step_s": measured,
            "simulated_step_s": simulated,
            "rel_error": (simulated - measured) / measured,
            "round_spread": spread,
            "measured_bubble": 0.3,
            "simulated_bubble": 0.3,
            **kw,
        }
    )


def _group(model: str, checkpoint: str, errors: list[float], spread: float) -> list[CellRow]:
    return [_cell(model, checkpoint, 2**i, e, spread) for i, e in enumerate(errors)]


# three groups: biased +8% (a small spread), +3%, and +6% with a 9% repeat spread
ROWS = [
    *_group("amoebanet", "always", [0.07, 0.08, 0.09], 0.01),
    *_group("amoebanet", "never", [0.02, 0.03, 0.05], 0.01),
    *_group("transformer", "always", [0.05, 0.06, 0.20], 0.09),
]


def test_a_biased_group_is_flagged_a_small_bias_is_not_and_noise_is_not_met():
    groups = {(g.model, g.checkpoint): g for g in group_rows(ROWS)}
    high, low, noisy = (
        groups["amoebanet", "always"],
        groups["amoebanet", "never"],
        groups["transformer", "always"],
    )
    assert high.median_signed == pytest.approx(0.08) and high.outside and high.verdict == "not met"
    assert low.median_signed == pytest.approx(0.03) and not low.outside and low.verdict == "met"
    assert noisy.median_signed == pytest.approx(0.06) and noisy.repeat_spread == pytest.approx(0.09)
    assert noisy.outside and noisy.verdict == NOISE  # outside ±5%, but below the repeat spread
    assert noisy.max_abs == pytest.approx(0.20) and high.cells == 3


def test_a_small_bias_below_the_spread_is_noise_not_met():
    rows = _group("mlp", "never", [0.02, 0.03, 0.04], 0.05)
    (g,) = group_rows(rows)
    assert not g.outside and g.verdict == NOISE
    (v,) = verdicts([g])
    assert v["target"] == f"not shown ({NOISE})" and v["groups"] == 1
    assert words("sim_lines", "parts", by=v["by"], noise=NOISE) == (
        f"0 met; 1 {NOISE} (mlp K = 2 never +3.0%: bias below the same-cell spread)"
    )


def test_the_split_keeps_kinds_apart_and_splits_remat_and_schedule():
    emulated = _cell("transformer", "always", 1, -0.5, 0.0, kind="emulated", K=4)
    other = _cell("amoebanet", "always", 1, 0.30, 0.0, schedule="1f1b")
    splits = {(s.kind, s.checkpoint, s.schedule): s for s in split_rows([*ROWS, emulated, other])}
    always = [0.07, 0.08, 0.09, 0.05, 0.06, 0.20]
    assert splits["real", "always", "gpipe"].cells == 6
    assert splits["real", "always", "gpipe"].max_abs == pytest.approx(max(always))
    assert splits["real", "always", "1f1b"].median_signed == pytest.approx(0.30)
    assert splits["real", "always", "all"].cells == 7
    assert splits["real", "never", "all"].median_abs == pytest.approx(0.03)
    assert splits["emulated", "always", "all"].median_signed == pytest.approx(-0.5)
    assert ("real", "never", "1f1b") not in splits  # no such cells: no row


def test_the_error_per_m_sits_beside_the_share_of_the_step_posting_messages_takes():
    """Per kind and M, cells of K >= 2 only: the error and the median of 1 - no_calls / step."""
    rows = [
        _cell("mlp", "never", 1, 0.01, 0.0, simulated_no_calls_s=0.101 * 0.98),
        _cell("mlp", "always", 1, 0.03, 0.0, simulated_no_calls_s=0.103 * 0.96),
        _cell("mlp", "never", 32, 0.40, 0.0, simulated_no_calls_s=0.14 * 0.7),
        _cell("mlp", "never", 32, 0.9, 0.0, K=1),  # one stage: no messages, not in the table
        _cell("mlp", "never", 4, -0.1, 0.0, kind="emulated", K=4),
        _cell("mlp", "never", 4, -0.3, 0.0, kind="emulated", K=8, micro_batch=2),  # M=4: 2 to 8
    ]
    a = pytest.approx
    assert by_m(rows) == [
        {"kind": "real", "M": 1, "micro_batch": (32, 32), "cells": 2, "median_signed": a(0.02),
         "median_abs": a(0.02), "max_abs": a(0.03), "posting": a(0.03)},
        {"kind": "real", "M": 32, "micro_batch": (1, 1), "cells": 1, "median_signed": a(0.4),
         "median_abs": a(0.4), "max_abs": a(0.4), "posting": a(0.3)},
        {"kind": "emulated", "M": 4, "micro_batch": (2, 8), "cells": 2, "median_signed": a(-0.2),
         "median_abs": a(0.2), "max_abs": a(0.3), "posting": None},  # no variant simulated
    ]  # fmt: skip


def test_the_page_is_rendered_from_the_split_csvs(tmp_path: Path):
    write_csv(tmp_path / "validation.csv", CellRow, ROWS)
    _, written = make(ARTEFACT, tmp_path / "validation.csv", tmp_path, argparse.Namespace(), "test")
    assert {tmp_path / "split.csv", tmp_path / "groups.csv"} <= set(written)
    groups = read_csv(tmp_path / "groups.csv", GroupRow)
    assert [g.verdict for g in groups] == ["not met", "met", NOISE]
    assert len(read_csv(tmp_path / "split.csv", SplitRow)) == 4  # (always, never) x (all, gpipe)
    md = (tmp_path / "sim.md").read_text()
    assert (
        "| real | amoebanet | 2 | always | 3 | +8.0% | 8.0% | 9.0% | 1.0% | **yes** | **not met** |"
        in md
    )
    assert (
        "| real | transformer | 2 | always | 3 | +6.0% | 6.0% | 20.0% | 9.0% | **yes** | " + NOISE
        in md
    )
    assert "every group's bias within ±5%: **not met** — of 3 groups 1 met" in md
    assert "`always` +7.5% (6 cells), `never` +3.0% (3 cells)" in md
