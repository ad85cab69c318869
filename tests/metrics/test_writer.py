"""The one writer of a run's files: atomic, and a folder that cannot be written is one line."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from gpipe_repro.engine.events import Event
from gpipe_repro.metrics.contract import PipelineInfo, RunMetrics
from gpipe_repro.metrics.writer import OutputError, write_metrics, write_run


def test_writes_the_three_files(tmp_path):
    ev = [
        Event("forward", 0, 0.0, 0.01, stage=0, step=1),
        Event("backward", 0, 0.02, 0.04, stage=1, step=1),
    ]
    m = RunMetrics(
        pipeline=PipelineInfo(
            K=2,
            M=1,
            checkpoint="never",
            schedule="gpipe",
            balance=[1, 1],
            balance_by="params",
            replicas=1,
        )
    )
    paths = write_run(tmp_path, m, ev)
    assert [p.name for p in paths] == ["metrics.json", "trace.json", "timeline.png"]
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}
    assert (tmp_path / "timeline.png").stat().st_size > 1000


def test_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path, monkeypatch):
    write_metrics(tmp_path, RunMetrics(status="ok"))
    real = Path.write_text

    def full(self, *a, **k):
        if self.name.endswith(".tmp"):
            real(self, "{", encoding="utf-8")  # part of it made it to disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OutputError, match="No space left on device") as err:
        write_metrics(tmp_path, RunMetrics(status="failed", error="x"))
    assert "\n" not in str(err.value)
    monkeypatch.undo()
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "ok"
    assert not list(tmp_path.glob("*.tmp"))


def test_a_folder_that_is_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "run"
    blocker.write_text("not a folder")
    with pytest.raises(OutputError, match="cannot create the run folder"):
        write_metrics(blocker / "sub", RunMetrics())
