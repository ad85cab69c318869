"""``bench/sharing_gap.py``: bad input is one line and exit 2; each setting's row is the fitted cost and
each M's residual per message (measured - simulated over the 2M messages a stage handles)."""

from __future__ import annotations

import json

import pytest
from _shared import ROOT, bench_module

from gpipe_repro.sim.measured.sharing import SharingFit


@pytest.fixture
def gap(monkeypatch):
    return bench_module("sharing_gap", monkeypatch)


def test_bad_input_is_one_line_and_exit_2(gap, tmp_path, capsys):
    assert gap.main(["--calibration", str(tmp_path / "none.json")]) == 2
    assert gap.main(["--rounds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--calibration" in err[0] and "--rounds=0" in err[1]


def test_each_setting_prints_its_fit_and_what_it_leaves_of_each_step(gap, monkeypatch, capsys):
    asked = []

    def fake(link, overhead_s, step_overhead_s, *, Ms, fwd_s, bwd_s, shape, rounds):
        asked.append((fwd_s, shape, rounds, link.send_call_s))
        # the fitted cost leaves 1 ms of the step at M = 2, 0.5 ms at the others
        points = [(M, 0.1 + (1e-3 if M == 2 else 5e-4), 0.1) for M in Ms]
        return SharingFit(7e-4, 0.0, points)

    monkeypatch.setattr(gap, "measure_sharing", fake)
    calib = json.loads((ROOT / "reports" / "sim" / "calibration.json").read_text())["device"]
    assert gap.main(["--rounds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line[0].isdigit()]
    assert len(rows) == len(gap.ACTION_MS) * len(gap.SHAPES) == len(asked)
    assert rows[0] == "0.25 | 4 | 0.700 | 1.000, 0.500, 0.500"
    assert {a[2] for a in asked} == {2} and asked[0][3] == calib["link"]["send_call_s"]
