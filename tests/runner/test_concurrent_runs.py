"""Two real ``gpipe-run`` processes into one run folder, two sweeps into one sweep folder (issue #36
finding 2): the second is refused in one line naming the folder and the first run (its pid), and the
first runs on, its files left as they are; its claim (``run.lock``, ``sweep.lock``) goes when it ends.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from _shared import finish, start, wait_for

SLOW_RUN = ["model.hidden=32", "model.depth=3", "logger=none", "train.eval=false"]


def _second_is_refused(first, second_args, folder, cwd):
    """Once the first has run a step, the second is refused: one line naming the folder and the
    first run's pid (the gpipe-run process ``start`` made)."""
    wait_for(lambda: any(folder.rglob("progress.jsonl")), 120, "the first run's first step")
    code, err, _ = finish(start(second_args, cwd), 120)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1, (code, err)
    assert str(folder) in lines[0] and f"pid {first.pid}" in lines[0] and "in use" in lines[0]
    assert first.poll() is None  # the first runs on, untouched
    os.killpg(first.pid, signal.SIGINT)
    return finish(first, 120)


@pytest.mark.slow
def test_the_second_of_two_concurrent_runs_into_one_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    args = [f"hydra.run.dir={run}", *SLOW_RUN]
    first = start([*args, "train.steps=100000"], tmp_path)
    code, err, _ = _second_is_refused(first, [*args, "train.steps=3"], run, tmp_path)
    assert code == 130, err
    m = json.loads((run / "metrics.json").read_text())
    assert (
        m["status"] == "interrupted" and m["steps"] == 100000
    )  # the first run's, not the second's
    assert not (run / "run.lock").exists()  # released at its end


@pytest.mark.slow
def test_the_second_of_two_concurrent_sweeps_into_one_folder_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", f"hydra.sweep.dir={sweep}", *SLOW_RUN, "pipeline.M=1,2"]
    first = start([*args, "train.steps=100000"], tmp_path)
    code, _, _ = _second_is_refused(first, [*args, "train.steps=3"], sweep, tmp_path)
    assert code == 130
    assert not (sweep / "sweep.lock").exists()
