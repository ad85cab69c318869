"""``bench/sharing_schedules.py``: bad input is one line and exit 2; every run is simulated as the
schedule it ran (interleaved with its v cells doing a rank's same work), and the fitted cost per
schedule is the one whose simulation the measured steps follow."""

from __future__ import annotations

import json

import pytest
from _shared import ROOT, bench_module

from gpipe_repro.sim.costs import Link


@pytest.fixture
def sharing(monkeypatch):
    return bench_module("sharing_schedules", monkeypatch)


def _device():
    dev = json.loads((ROOT / "reports" / "sim" / "calibration.json").read_text())["device"]
    link = Link(**{**dev["link"], "wake": tuple(tuple(p) for p in dev["link"]["wake"])})
    return dev, link


def test_bad_input_is_one_line_and_exit_2(sharing, tmp_path, capsys):
    assert sharing.main(["--calibration", str(tmp_path / "none.json")]) == 2
    assert sharing.main(["--rounds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--calibration" in err[0] and "--rounds=0" in err[1]


def test_a_schedule_posting_more_messages_is_charged_more(sharing):
    dev, link = _device()
    cost = 5e-4
    base = {
        s: sharing._simulated(dev, link, s, v, 32, 0.0)
        for s, v in (("1f1b", 1), ("interleaved", 2))
    }
    charged = {
        s: sharing._simulated(dev, link, s, v, 32, cost)
        for s, v in (("1f1b", 1), ("interleaved", 2))
    }
    assert all(charged[s] > base[s] for s in base)
    assert charged["interleaved"] - base["interleaved"] > charged["1f1b"] - base["1f1b"]


def test_each_run_gets_the_cost_its_steps_follow(sharing, monkeypatch, capsys, tmp_path):
    dev, link = _device()
    truth = {"gpipe": 7e-4, "1f1b": 6e-4, "interleaved": 3e-4}

    def fake_launch(fn, world, args, threads):
        (ring,) = args
        out = {}
        for schedule, v, r in sharing.RUNS:
            if r == ring:
                for M in sharing.MS:
                    t = sharing._simulated(dev, link, schedule, v, M, truth[schedule]) + 2e-3
                    out[sharing._key(schedule, v, ring, M)] = [t] * 3
        return [out, out]

    monkeypatch.setattr(sharing, "launch", fake_launch)
    out = tmp_path / "sharing.json"
    assert sharing.main(["--rounds", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == len(sharing.RUNS) * len(sharing.MS)
    for r in rows:
        assert r["fitted_shared_s"] == pytest.approx(truth[r["schedule"]], rel=0.05)
        assert r["fitted_fixed_s"] == pytest.approx(2e-3, abs=3e-4)
    printed = [line for line in capsys.readouterr().out.splitlines() if " | " in line]
    assert len(printed) == 1 + len(rows)

    def no_launch(*args, **kwargs):
        raise AssertionError("--from measures nothing")

    monkeypatch.setattr(sharing, "launch", no_launch)
    again = tmp_path / "again.json"
    assert sharing.main(["--from", str(out), "--json", str(again)]) == 0
    assert json.loads(again.read_text()) == rows
    rows[0].pop("rounds_s")
    out.write_text(json.dumps(rows))
    assert sharing.main(["--from", str(out)]) == 2
    assert "--from" in capsys.readouterr().err
