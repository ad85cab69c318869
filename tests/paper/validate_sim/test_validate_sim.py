"""The validation's page: rank agreement, targets, and a page generated from result files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpipe_repro.measure.roofline_check import RooflineRow
from gpipe_repro.measure.simulator import KEY, TRACE_CELL, CellRow
from gpipe_repro.paper.artefact import make
from gpipe_repro.paper.validate_sim import ARTEFACT
from gpipe_repro.paper.validate_sim.findings import by_group, roofline, summarize, twins
from gpipe_repro.typed_csv import write_csv


def write_report(folder: Path, rows: list[CellRow]) -> Path:
    """The page of ``rows`` re-rendered from their CSV (with the files beside it)."""
    write_csv(folder / "validation.csv", CellRow, rows)
    make(ARTEFACT, folder / "validation.csv", folder, argparse.Namespace(), "test")
    return folder / "sim.md"


def _row(kind: str, M: int, measured: float, simulated: float, wait: float = 0.0, **kw) -> CellRow:
    return CellRow(
        **{
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
    )


def test_the_error_by_group_shows_which_way_each_k_is_biased(tmp_path):
    rows = [
        _row("real", 1, 0.100, 0.101, K=1),
        _row("real", 2, 0.100, 0.099, K=1),
        _row("real", 1, 0.100, 0.080),  # K = 2: 20% too fast
        _row("real", 2, 0.100, 0.070),
        _row("real", 4, 0.100, 0.090),
    ]
    groups = by_group(rows)["by_group"]
    assert [(g["K"], g["cells"]) for g in groups] == [(1, 2), (2, 3)]
    assert groups[1]["median"] == pytest.approx(-0.2) and groups[1]["max"] == pytest.approx(-0.1)
    assert groups[1]["raw"] is None  # no cell without the probe: a dash on the page
    text = write_report(tmp_path, rows).read_text()
    assert "| transformer | real | 1 | 2 | +0.0% | -1.0% | +1.0% | — |" in text
    assert "| transformer | real | 2 | 3 | -20.0% | -30.0% | -10.0% |" in text
    assert "One process (K = 1): median +0.0%" in text and "(K ≥ 2): median -20.0%" in text


def test_the_roofline_per_model_and_pass_absolute_and_rescaled(tmp_path):
    """Per model and pass: the median and max abs. error and the median after one common factor
    (the median measured / roofline ratio); layers measured as nothing (rel_error None) left out."""
    rows = [
        RooflineRow("transformer", 0, "Linear", 8, "forward", 1.0, 0.5, -0.5),
        RooflineRow("transformer", 1, "Linear", 8, "forward", 2.0, 0.5, -0.75),
        RooflineRow("transformer", 0, "Linear", 8, "backward", 2.0, 1.0, -0.5),
        RooflineRow("transformer", 1, "Linear", 8, "backward", 2.0, 1.0, None),
    ]
    assert roofline(tmp_path) is None  # not measured
    write_csv(tmp_path / "roofline.csv", RooflineRow, rows)
    r = roofline(tmp_path)
    assert r is not None and r["ratio"] == pytest.approx(2.0)  # ratios 2, 4, 2
    forward, backward = r["passes"]
    assert forward == {"model": "transformer", "pass_": "forward", "layers": 2, "median": 0.625,
                       "max": 0.75, "shape": pytest.approx(0.25)}  # fmt: skip
    assert backward["layers"] == 1 and backward["shape"] == pytest.approx(0.0)
    assert (tmp_path / "roofline.png").exists()


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
    ev = [
        {"action": a, "mb": 0, "start": t, "end": t + 0.01, "stage": k, "replica": 0, "step": 3}
        for k in (0, 1)
        for a, t in (("forward", 0.0 + k * 0.01), ("backward", 0.05 - k * 0.01))
    ]
    with open(tmp_path / "events.jsonl", "w") as f:
        for r in rows:
            key = {k: getattr(r, k) for k in KEY}
            f.write(json.dumps({**key, "measured": ev, "simulated": ev}) + "\n")
    (tmp_path / "calibration.json").write_text(
        json.dumps({"seconds": 60, "device": {"overhead_s": 1e-4}})
    )
    md = write_report(tmp_path, rows).read_text()
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


def test_the_targets_table_shows_the_normalised_and_the_raw_comparison(tmp_path):
    rows = [
        _row(
            "real",
            1,
            0.100,
            0.103,
            measured_raw_step_s=0.13,
            simulated_raw_step_s=0.10,
            rel_error_raw=-0.3 / 1.3,
            speed=0.8,
            round_spread=0.02,
            round_spread_raw=0.2,
        ),
        _row(
            "real",
            2,
            0.100,
            0.095,
            measured_raw_step_s=0.10,
            simulated_raw_step_s=0.12,
            rel_error_raw=0.2,
            speed=1.1,
            round_spread=0.04,
            round_spread_raw=0.1,
        ),
        _row("emulated", 4, 0.3, 0.29),
    ]
    s = summarize(rows)["real"]
    assert s["normalized"] and s["median"] == pytest.approx(0.04)
    assert s["raw_median"] == pytest.approx((0.3 / 1.3 + 0.2) / 2) and s["raw_max"] == 0.3 / 1.3
    assert s["spread_median"] == pytest.approx(0.03) and s["spread_raw_max"] == pytest.approx(0.2)
    assert (s["speed_min"], s["speed_max"]) == (0.8, 1.1)
    (tmp_path / "calibration.json").write_text(json.dumps({"speed_reference_s": 0.0035}))
    md = write_report(tmp_path, rows).read_text()
    assert "| real, speed-normalised | 2 | 4.0% | 5.0% |" in md
    assert "| real, raw (no probe) | 2 | 21.5% | 23.1% | -1.5% |" in md
    assert "| 3.0% / 4.0% |" in md and "| 15.0% / 20.0% |" in md  # the rounds' spread, both ways
    assert "ran at 0.80–1.10 times the reference speed" in md and "3.50 ms" in md
    assert "| emulated | 1 |" in md  # emulated cells are never normalised


def test_the_same_work_measured_twice_bounds_the_max_error_any_one_prediction_reaches(tmp_path):
    # gpipe and 1f1b at M = 1 simulate alike; the M = 2 pair does not (its times differ), nor does
    # a cell with no twin: only the M = 1 pair counts
    def cell(schedule: str, M: int, measured: float, simulated: float, raw: float) -> CellRow:
        return _row("real", M, measured, simulated, schedule=schedule, measured_raw_step_s=raw,
                    simulated_raw_step_s=simulated, rel_error_raw=(simulated - raw) / raw,
                    speed=1.0)  # fmt: skip

    rows = [
        cell("gpipe", 1, 0.100, 0.110, 0.100),
        cell("1f1b", 1, 0.150, 0.110, 0.200),
        cell("gpipe", 2, 0.100, 0.100, 0.100),
        cell("1f1b", 2, 0.300, 0.101, 0.300),
        cell("gpipe", 4, 0.100, 0.100, 0.100),
    ]
    t = twins(rows)
    assert t is not None and t["pairs"] == 1 and t["gap_max"] == pytest.approx(0.5)
    assert t["floor_max"] == pytest.approx(0.05 / 0.25)  # (hi - lo) / (hi + lo)
    assert (t["slower"], t["directed"]) == (1, 1) and t["worst"].M == 1
    # no prediction does better on the pair than the floor, the midpoint reaches it
    for p in (0.100, 0.120, 0.150, 0.200):
        assert max(abs(p - 0.100) / 0.100, abs(p - 0.150) / 0.150) >= t["floor_max"] - 1e-12
    assert twins(rows, raw=True)["floor_max"] == pytest.approx(0.1 / 0.3)
    assert twins(rows[2:]) is None
    # the real cells' target line says the max is out of reach when the floor is above it
    (tmp_path / "calibration.json").write_text(json.dumps({"speed_reference_s": 0.0035}))
    md = write_report(tmp_path, rows).read_text()
    assert "out of reach on these measurements" in md and "at least 20.0% from one of" in md
    assert "*The same work twice*, real cells" in md and "1 pairs, measured apart" in md
    rows[1] = cell("1f1b", 1, 0.105, 0.110, 0.105)  # 2.4% from the midpoint: within the 10% max
    assert "out of reach" not in write_report(tmp_path, rows).read_text()


def test_the_dilation_is_described_as_the_calibration_ran_it(tmp_path):
    import json

    rows = [_row("real", 1, 0.1, 0.1), _row("emulated", 1, 0.1, 0.1)]

    def page(calib: dict) -> str:
        (tmp_path / "calibration.json").write_text(json.dumps(calib))
        return write_report(tmp_path, rows).read_text()

    # a calibration from before the dilation grew with the ranks per core re-renders as it was
    old = page({"settings": {"dilation": 3.0, "emulated_K": [4, 8]}, "cores": 2})
    assert "every emulated layer sleeps 3.0 times its profiled cost" in old
    assert "CPU work of 8 ranks a small share of 2 cores" in old
    new = page(
        {"settings": {"dilation_scale": 5.0}, "dilations": {"K=4": 10.0, "K=8": 20.0}, "cores": 2}
    )
    assert "5 times the ranks per core (2 cores here), K=4 ×10, K=8 ×20" in new
    assert "each forward or backward action of K emulated ranks" not in new  # not measured then
    acted = page(
        {"settings": {"dilation_scale": 5.0}, "dilations": {"K=4": 10.0}, "cores": 2,
         "emulation_action_s": {"K=4": 9.0e-4, "K=8": 1.1e-3}}
    )  # fmt: skip
    assert (
        "each forward or backward action of K emulated ranks costs 900 µs at K=4, 1100 µs at K=8"
        in acted
    )


def test_the_sharing_term_is_described_as_the_calibration_charged_it(tmp_path):
    rows = [_row("real", 1, 0.1, 0.1), _row("emulated", 1, 0.1, 0.1)]

    def page(**calib: object) -> str:
        base = {"settings": {}, "cores": 2, "device": {"shared_message_s": 6e-4}}
        (tmp_path / "calibration.json").write_text(json.dumps({**base, **calib}))
        return write_report(tmp_path, rows).read_text()

    # a calibration from before the rule re-renders as it was: every message paid
    old = page()
    assert "each message a real cell's rank sends or receives costs it 600 µs" in old
    assert "posts while the other ranks' compute takes every core" not in old
    new = page(sharing="cores taken")
    assert (
        "a message a real cell's rank posts while the other ranks' compute takes every core "
        "costs it 600 µs" in new
    )
    assert "each message a real cell's rank sends or receives" not in new
    receives = page(sharing="receives")
    assert "each message a rank receives reaches it no earlier than 600 µs after" in receives
    assert "posts while the other ranks' compute takes every core" not in receives


@pytest.mark.slow
def test_the_validation_pipeline_writes_its_report(tmp_path):
    import argparse
    import csv
    from unittest import mock

    from gpipe_repro.measure.simulator import CellRow, Settings
    from gpipe_repro.paper.artefact import make
    from gpipe_repro.paper.validate_sim import ARTEFACT
    from gpipe_repro.typed_csv import columns

    s = Settings(
        models=["imbalanced"],
        real_K=[1],
        emulated_models=["transformer"],
        emulated_K=[2],
        Ms=[4],
        schedules=["gpipe"],
        later=[("interleaved", 2)],  # the schedules since GPipe: a launch of their own, on a ring
        checkpoints=["always"],
        rounds=1,
        emulated_rounds=1,
        warmup=1,
        steps=2,
        repeats=2,
    )
    with mock.patch.object(Settings, "quick", return_value=s):
        report, written = make(ARTEFACT, None, tmp_path, argparse.Namespace(quick=True), "test")
    assert [(r.kind, r.K, r.M, r.schedule) for r in report.rows] == [
        ("real", 1, 4, "gpipe"),  # no later schedule at K = 1
        ("emulated", 2, 4, "gpipe"),
        ("emulated", 2, 4, "interleaved"),
    ]
    assert len(report.rows[-1].balance.split("-")) == 4  # K x v cells: v = 2
    with open(tmp_path / "validation.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == columns(CellRow) and len(rows) == 3
    assert all(float(r["measured_step_s"]) > 0 and float(r["simulated_step_s"]) > 0 for r in rows)
    md = (tmp_path / "sim.md").read_text()
    assert (
        "| real | 1 |" in md
        and "| emulated | 2 |" in md  # gpipe and interleaved
        and "What each modelling choice buys" in md
    )
    assert (tmp_path / "trace_worst_emulated_measured.json").exists()
    assert {p.name for p in written} >= {"validation.csv", "sim.md", "cpu.yaml", "roofline.csv"}
    # re-rendered from its CSV alone (and the files beside it): the same page but the provenance
    again = tmp_path / "again"
    make(ARTEFACT, tmp_path / "validation.csv", again, argparse.Namespace(), "test")
    body = lambda p: [x for x in p.read_text().splitlines() if not x.startswith("Generated by")]  # noqa: E731
    assert body(again / "sim.md") == body(tmp_path / "sim.md")
