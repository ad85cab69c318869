"""``bench/resimulate.py``: every real cell of a validation is simulated again from its recorded
profile and device model as the validation did (one cut per rank, or the cell's own cut of several
model cells per rank), raw and probed, against the same measured steps; bad input is one line and
exit 2."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from _shared import bench_module

from gpipe_repro.measure import calibration
from gpipe_repro.measure.calibration import simulate_cell
from gpipe_repro.measure.simulator import CellRow
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured import DeviceModel
from gpipe_repro.sim.measured.profile import LayerProfile
from gpipe_repro.typed_csv import write_csv


@pytest.fixture
def rs(monkeypatch):
    return bench_module("resimulate", monkeypatch)


DM = DeviceModel(
    "test", Link(1e-4, 1e9, 1, 2e-5, 3e-5, ((1e-3, 1e-5),)), 1e-5, 1e-4, False, 1e-5, 5e-4,
    "cache", ((2e-3, 1e-4),),
)  # fmt: skip
# (K, M, schedule, balance): one cut per rank, and interleaved's own cut of 2 cells per rank
CELLS = ((1, 2, "gpipe", [4]), (2, 4, "1f1b", [2, 2]), (2, 4, "interleaved", [1, 1, 1, 1]))


def _folder(tmp_path, measured_over: float, raw_over: float, monkeypatch):
    """A validation on a 2-core host whose measured steps are the simulated ones times ``*_over``."""
    monkeypatch.setattr(calibration, "cores", lambda: 2)
    sizes = [8, 16]
    costs = {n: [LayerCost(1e-3 * n / 8, 8e-4 * n / 8, 2e-3 * n / 8, 4096) for _ in range(4)]
             for n in sizes}  # fmt: skip
    raw = {n: [LayerCost(c.forward_s * 1.1, c.forward_nograd_s * 1.1, c.backward_s * 1.1, 4096)
               for c in cs] for n, cs in costs.items()}  # fmt: skip
    prof = LayerProfile(sizes, costs, {}, 1, "measured", raw, 0.01)
    device = asdict(DM)
    device.pop("source")
    (tmp_path / "calibration.json").write_text(
        json.dumps({"device": device, "cores": 2, "profiles": {"toy": prof.to_json()}})
    )
    rows = []
    for K, M, schedule, balance in CELLS:
        cell = {"M": M, "schedule": schedule, "checkpoint": "never"}
        if len(balance) > K:
            cell |= {"balance": balance, "virtual_stages": len(balance) // K}
        n = 32 // M
        probed = simulate_cell(cell, K, balance, costs[n], DM, shared=True).step_s
        unscaled = simulate_cell(cell, K, balance, raw[n], DM, shared=True).step_s
        rows.append(CellRow(
            "toy", K, M, schedule, "never", "real", "-".join(map(str, balance)), n,
            probed * measured_over, probed, 1 / measured_over - 1,
            unscaled * raw_over, unscaled, 1 / raw_over - 1, speed=0.9,
        ))  # fmt: skip
    rows.append(replace_kind(rows[-1]))
    write_csv(tmp_path / "validation.csv", CellRow, rows)
    monkeypatch.setattr(calibration, "cores", lambda: 16)  # this host is not the validation's
    return tmp_path


def replace_kind(row: CellRow) -> CellRow:
    d = asdict(row)
    d["kind"] = "emulated"  # not simulated again: an emulated cell's costs are slept, dilated
    return CellRow(**d)


def test_each_real_cell_comes_back_with_the_error_it_was_measured_with(rs, tmp_path, monkeypatch):
    folder = _folder(tmp_path, 1.25, 1.6, monkeypatch)
    out = tmp_path / "r.json"
    assert rs.main(["--from", str(folder), "--json", str(out)]) == 0
    (report,) = json.loads(out.read_text())
    assert report["shared_message_s"] == pytest.approx(5e-4)
    cells = report["cells"]
    assert [(c["K"], c["schedule"]) for c in cells] == [(K, s) for K, _, s, _ in CELLS]
    for c in cells:
        assert c["error"] == pytest.approx(1 / 1.25 - 1) == c["committed"]
        assert c["error_raw"] == pytest.approx(1 / 1.6 - 1) == c["committed_raw"]


def test_another_cost_per_message_moves_the_cells_of_two_ranks_only(rs, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    args = ["--from", str(_folder(tmp_path, 1.0, 1.0, monkeypatch)), "--json", str(out)]
    assert rs.main([*args, "--shared-message-us", "500", "5000"]) == 0
    same, more = json.loads(out.read_text())
    assert same["shared_message_s"] == pytest.approx(5e-4)
    for a, b in zip(same["cells"], more["cells"]):
        assert a["error"] == pytest.approx(0.0, abs=1e-12)
        if a["K"] == 1:
            assert b["error"] == a["error"]
        else:
            assert b["error"] > a["error"] + 0.01


def test_bad_input_is_one_line_and_exit_2(rs, tmp_path, capsys, monkeypatch):
    assert rs.main(["--from", str(tmp_path / "none")]) == 2
    folder = _folder(tmp_path, 1, 1, monkeypatch)
    assert rs.main(["--from", str(folder), "--shared-message-us", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--from" in err[0] and "--shared-message-us" in err[1]
