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


class _Stream:
    """stderr as a log (not a terminal) or as a terminal, written to a list."""

    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


def test_progress_in_a_log_is_a_line_at_most_every_few_seconds_with_the_eta():
    """Issue #36 finding 8: a run said nothing while it worked."""
    from gpipe_repro.metrics.progress import ConsoleProgress

    now = [0.0]
    stream = _Stream(tty=False)
    show = ConsoleProgress("K=2 M=4", 100, every_s=5.0, stream=stream, clock=lambda: now[0])
    for step in range(100):  # one step a second
        now[0] += 1.0
        show(StepRecord(step, 2.0 - step / 100, 1.0, 64.0))
    lines = stream.text.splitlines()
    assert len(lines) == 19  # at 5, 10, ..., 95 s; the last step is the job's summary line's
    assert lines[0] == "K=2 M=4: step 5/100  loss 1.9600  64.0 samples/s  ETA 0:01:35"
    assert lines[-1].startswith("K=2 M=4: step 95/100") and lines[-1].endswith("ETA 0:00:05")


def test_progress_on_a_terminal_is_a_bar():
    from gpipe_repro.metrics.progress import ConsoleProgress

    stream = _Stream(tty=True)
    with ConsoleProgress("K=1 M=1", 10, stream=stream) as show:
        show.bar.delay = 0  # shown at once (a run shorter than a second shows none)
        for step in range(4):
            show(StepRecord(step, 0.5, 0.01, 100.0))
    assert "K=1 M=1" in stream.text and "4/10" in stream.text and "loss 0.5000" in stream.text


def test_gpipe_run_shows_progress_lines_and_one_summary_line_per_job(tmp_path):
    from _shared import gpipe_run

    r = gpipe_run(
        f"hydra.run.dir={tmp_path}/run",
        "model.hidden=16",
        "model.depth=2",
        "train.batch_size=16",
        "train.steps=600",
        "train.eval=false",
        "train.progress_every_s=0.2",
        "logger=none",
        env={"GPIPE_PROGRESS": "1"},
    )
    assert r.returncode == 0, r.stderr
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("K=1 M=1: step ")]
    assert progress, r.stderr
    assert all("/600  loss " in ln and " samples/s  ETA " in ln for ln in progress)
    (summary,) = r.stdout.strip().splitlines()
    assert summary.startswith("K=1 M=1: 600 steps in ") and "samples/s" in summary


def test_console_progress_is_shown_unless_switched_off(monkeypatch):
    from gpipe_repro.metrics.progress import ConsoleProgress, console_progress

    monkeypatch.delenv("GPIPE_PROGRESS", raising=False)
    with console_progress(False, "K=1 M=1", 10, 5.0) as off:
        assert off is None
    with console_progress(True, "K=2 M=4", 10, 5.0) as on:
        assert isinstance(on, ConsoleProgress) and (on.label, on.steps) == ("K=2 M=4", 10)
    monkeypatch.setenv("GPIPE_PROGRESS", "0")
    with console_progress(True, "K=2 M=4", 10, 5.0) as env_off:
        assert env_off is None


def test_tee_calls_each_callback_in_turn_and_skips_none():
    from gpipe_repro.metrics.progress import tee

    seen: list[tuple[str, int]] = []
    each = tee(lambda r: seen.append(("a", r.step)), None, lambda r: seen.append(("b", r.step)))
    each(StepRecord(3, 0.5, 0.1, 10.0))
    assert seen == [("a", 3), ("b", 3)]
