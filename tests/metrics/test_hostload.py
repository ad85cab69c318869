"""The host's load read from a fake /proc tree, and the prediction's comparison and sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpipe_repro.metrics.hostload import (
    BUSY_WAIT_SHARE,
    SchedWindow,
    busy_sentence,
    compare,
    read_sched,
    wait_share,
)
from gpipe_repro.runner.predict import summary


def _proc(root: Path, pid: int, threads: dict[int, tuple[int, int]]) -> Path:
    """A fake /proc holding ``pid``'s threads, each (ns on a core, ns waiting in a run queue)."""
    for tid, (run, wait) in threads.items():
        d = root / str(pid) / "task" / str(tid)
        d.mkdir(parents=True)
        (d / "schedstat").write_text(f"{run} {wait} 7\n")
    return root


def test_schedstat_is_summed_over_a_processs_threads(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 42, {42: (3_000_000_000, 1_000_000_000), 43: (500_000_000, 0)})
    s = read_sched(42, proc)
    assert s is not None
    assert (s.run_s, s.wait_s, s.threads) == pytest.approx((3.5, 1.0, 2))


def test_no_schedstat_is_unknown_never_zero(tmp_path: Path) -> None:
    assert read_sched(42, tmp_path) is None  # no such process / no /proc
    (tmp_path / "42" / "task" / "42").mkdir(parents=True)  # a kernel without schedstat
    assert read_sched(42, tmp_path) is None
    assert wait_share([SchedWindow(1.0, 0.1, 2, 1.0), None]) is None  # one rank unknown


def test_the_wait_share_is_wait_over_runnable_time_across_ranks(tmp_path: Path) -> None:
    before = read_sched(1, _proc(tmp_path / "a", 1, {1: (1_000_000_000, 0)}))
    after = read_sched(1, _proc(tmp_path / "b", 1, {1: (4_000_000_000, 1_000_000_000)}))
    w = SchedWindow.between(before, after, 5.0)
    assert w is not None and (w.run_s, w.wait_s) == pytest.approx((3.0, 1.0))
    other = SchedWindow(run_s=3.0, wait_s=3.0, threads=4, wall_s=5.0)
    assert wait_share([w, other]) == pytest.approx(4.0 / 10.0)
    # a thread that ended between the two reads takes its counts with it: never below zero
    assert SchedWindow.between(after, before, 1.0) == SchedWindow(0.0, 0.0, 1, 1.0)


def test_a_busy_host_is_named_as_the_gaps_cause_above_the_threshold_alone() -> None:
    assert busy_sentence(None, -0.3) is None
    assert busy_sentence(BUSY_WAIT_SHARE * 0.9, -0.3) is None
    said = busy_sentence(BUSY_WAIT_SHARE, -0.3)  # slower than predicted: the host's
    assert said is not None and "host's, not the simulator's" in said and "-30%" in said
    faster = busy_sentence(0.25, 1.4)  # faster than predicted: the profile shared the cores too
    assert faster is not None and "does not measure the simulator" in faster and "+140%" in faster
    assert "host's, not" not in faster


def test_prediction_beside_measurement_with_the_load() -> None:
    quiet = compare(0.09, 0.10, 0.01)
    assert quiet.error == pytest.approx(-0.1)
    assert quiet.host_busy is False and quiet.note is None
    line = summary(quiet)
    assert "90.0 ms" in line and "100.0 ms" in line and "-10.0%" in line and "1%" in line
    busy = compare(0.07, 0.10, 0.4)
    assert busy.host_busy is True and busy.note is not None and busy.note in summary(busy)
    unknown = compare(0.1, 0.1, None)
    assert unknown.host_busy is None and "host wait unknown" in summary(unknown)


def test_this_process_can_be_read_where_linux_has_schedstat() -> None:
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc here")
    s = read_sched()
    if s is None:
        pytest.skip("this kernel keeps no schedstat")
    assert s.threads >= 1 and s.run_s > 0
