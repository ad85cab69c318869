"""The soak's short version (issue #18 item 3): three faults, one during a save's write, each resumed
with ``train.resume=auto``; losses and the final save bit-identical to the uninterrupted run's."""

from __future__ import annotations

import json

import pytest

from gpipe_repro.runner.soak import soak


@pytest.mark.slow
def test_three_faults_and_resumes_change_nothing(tmp_path):
    r = soak(tmp_path / "report", minutes=0.1, faults=3, seed=1, work=tmp_path / "work")
    assert r["status"] == "ok" and r["final_exit_code"] == 0
    assert r["losses_identical"] and r["parameters_identical"]
    faults = r["faults"]
    assert len(faults) == 3 and "sigkill-in-save" in {f["kind"] for f in faults}
    for f in faults:
        assert f["exit_code"] in ((130,) if f["kind"] in ("sigint", "sigterm") else (1,)), f
        assert f["lost_steps"] == f["step"] - f["saved_step"] >= 0, f
        if f["kind"] in ("sigint", "sigterm"):  # a stop saves the step it finished: nothing lost
            assert f["lost_steps"] == 0, f
    table = (tmp_path / "report" / "soak.md").read_text()
    assert table.count("| sig") == 3 and "PASS." in table
    # the report says where it came from: the runs' own commit, not a guess
    commit = json.loads((tmp_path / "work" / "reference" / "metrics.json").read_text())["env"]
    assert r["git_commit"] == commit["git_commit"] and f"commit {commit['git_commit']};" in table
