"""The live record: written per step, followed from another thread, readable after a crash."""

from __future__ import annotations

import time

from gpipe_repro.metrics.progress import Follower, ProgressWriter, StepRecord, read_progress


def test_records_reach_a_follower_while_they_are_written(tmp_path):
    path = tmp_path / "progress.jsonl"
    seen: list[tuple[int, float]] = []
    w = ProgressWriter(path)
    with Follower(path, lambda r: seen.append((r.step, time.monotonic())), interval_s=0.02):
        for step in range(3):
            w.write(StepRecord(step, 1.0 / (step + 1), 0.1, 10.0))
            time.sleep(0.15)
        arrived = list(seen)
    assert [s for s, _ in arrived] == [0, 1, 2]
    # live: each record arrived well before the next was written, not all at the end
    assert arrived[1][1] - arrived[0][1] > 0.1


def test_a_torn_last_line_is_skipped_and_non_finite_losses_are_null(tmp_path):
    path = tmp_path / "progress.jsonl"
    w = ProgressWriter(path)
    w.write(StepRecord(0, float("inf"), 0.1, 10.0))
    with path.open("a") as f:
        f.write('{"step": 1, "loss": 0.5, "step_ti')  # killed mid-write
    recs = read_progress(path)
    assert len(recs) == 1 and recs[0].loss is None


def test_a_new_writer_starts_a_fresh_record(tmp_path):
    path = tmp_path / "progress.jsonl"
    ProgressWriter(path).write(StepRecord(0, 1.0, 0.1, 10.0))
    ProgressWriter(path).write(StepRecord(0, 2.0, 0.1, 10.0))
    assert [r.loss for r in read_progress(path)] == [2.0]
