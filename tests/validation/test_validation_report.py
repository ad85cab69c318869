"""The validation report: rank agreement, targets, and a report generated from result files."""

from __future__ import annotations

import csv
import json

import pytest

from gpipe_repro.validation.report import (
    KEY,
    TRACE_CELL,
    by_group,
    spearman,
    summarize,
    write_report,
)
from gpipe_repro.validation.run import CSV_COLUMNS


def test_spearman_is_one_for_the_same_order_and_minus_one_reversed():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)  # 1 - 6*4/(5*24)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)  # tied ranks averaged
    assert spearman([1.0], [2.0]) is None


def _row(kind: str, M: int, measured: float, simulated: float, wait: float = 0.0, **kw) -> dict:
    return {
        "model": "transformer",
        "K": 2 if kind == "real" else 4,
        "M": M,
        "schedule": "gpipe",
        "checkpoint": "never",
        "kind": kind,
        "balance": "4-4",
        "micro_batch": 32 // M,
        "measured_step_s": measured,
        "simulated_step_s": simulated,
        "rel_error": (simulated - measured) / measured,
        "measured_iqr_s": 0.001,
        "steps_timed": 4,
        "core_wait_share": wait,
        "measured_bubble": 0.3,
        "simulated_bubble": 0.31,
        **kw,
    }


def test_the_error_by_group_shows_which_way_each_k_is_biased():
    rows = [
        _row("real", 1, 0.100, 0.101, K=1),
        _row("real", 2, 0.100, 0.099, K=1),
        _row("real", 1, 0.100, 0.080),  # K = 2: 20% too fast
        _row("real", 2, 0.100, 0.070),
        _row("real", 4, 0.100, 0.090),
    ]
    text = "\n".join(by_group(rows))
    assert "| transformer | real | 1 | 2 | +0.0% | -1.0% | +1.0% |" in text
    assert "| transformer | real | 2 | 3 | -20.0% | -30.0% | -10.0% |" in text
    assert "One process (K = 1): median +0.0%" in text and "(K ≥ 2): median -20.0%" in text


def test_targets_per_kind_and_cells_disturbed_by_other_load():
    rows = [
        _row("real", 1, 0.100, 0.103),
        _row("real", 2, 0.120, 0.118),
        _row("real", 4, 0.140, 0.2, wait=0.4),
        _row("emulated", 1, 0.1, 0.102),
        _row("emulated", 8, 0.2, 0.204),
    ]
    s = summarize(rows)
    assert s["real"]["cells"] == 3 and s["real"]["max"] == pytest.approx(0.06 / 0.14)
    assert (
        not s["real"]["met"] and s["real"]["quiet"] == 2
    )  # the disturbed cell misses, the others do not
    assert s["real"]["quiet_max"] == pytest.approx(0.03)
    assert s["emulated"]["met"] and s["emulated"]["spearman"] == pytest.approx(1.0)


def test_the_report_is_generated_from_the_files(tmp_path):
    cell = {**TRACE_CELL}
    rows = [
        _row("real", 8, 0.25, 0.26, **{k: cell[k] for k in KEY if k not in ("kind", "M")}),
        _row("real", 1, 0.1, 0.2),
        _row("emulated", 4, 0.3, 0.29),
    ]
    with open(tmp_path / "validation.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    ev = [
        {"action": a, "mb": 0, "start": t, "end": t + 0.01, "stage": k, "replica": 0, "step": 3}
        for k in (0, 1)
        for a, t in (("forward", 0.0 + k * 0.01), ("backward", 0.05 - k * 0.01))
    ]
    with open(tmp_path / "events.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({**{k: r[k] for k in KEY}, "measured": ev, "simulated": ev}) + "\n")
    (tmp_path / "calibration.json").write_text(
        json.dumps({"seconds": 60, "device": {"overhead_s": 1e-4}})
    )
    md = write_report(tmp_path).read_text()
    assert "| real | 2 | 52.0% | 100.0% |" in md  # errors 4% and 100%: their median and max
    assert (
        "One cell, measured and simulated" in md
        and (tmp_path / "trace_cell_measured.json").exists()
    )
    trace = json.loads((tmp_path / "trace_cell_simulated.json").read_text())
    assert {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"} == {
        "forward 0",
        "backward 0",
    }
    assert (tmp_path / "trace_worst_real.png").exists() and (tmp_path / "validation.png").exists()
