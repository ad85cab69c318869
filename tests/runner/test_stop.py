"""runner.stop in this process: what the first and the second SIGINT/SIGTERM do, the STOP file a run's
ranks vote on, and the grace period that turns a stop into an immediate one."""

from __future__ import annotations

import signal
import threading

import pytest

from gpipe_repro.rank import STOP_FILE
from gpipe_repro.runner import stop
from gpipe_repro.runner.stop import StopControl


def test_a_first_signal_during_a_run_asks_its_ranks_to_stop_after_the_step(tmp_path, capsys):
    ctl = StopControl()
    with ctl.running(tmp_path, grace_s=60):
        assert not (tmp_path / STOP_FILE).exists()
        ctl._handle(signal.SIGINT, None)
        assert ctl.requested and (tmp_path / STOP_FILE).exists()  # the ranks' vote reads it
        assert ctl._timer is not None and ctl._timer.is_alive()  # the grace period runs
    assert ctl._timer is None  # the run ended within its grace: no late stop
    assert not (tmp_path / STOP_FILE).exists()  # the folder is left clean
    err = capsys.readouterr().err
    assert "SIGINT: stopping after the current step (at most 60 s; again to stop at once)" in err


def test_a_second_signal_stops_at_once(tmp_path):
    ctl = StopControl()
    with ctl.running(tmp_path, grace_s=60):
        ctl._handle(signal.SIGTERM, None)
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            ctl._handle(signal.SIGINT, None)
        assert ctl._timer is None  # the grace timer is cancelled, not left to fire later


def test_a_signal_between_jobs_skips_the_jobs_left_and_the_next_run_stops_after_one_step(
    tmp_path, capsys
):
    ctl = StopControl()
    ctl._handle(signal.SIGTERM, None)  # no run under way (a sweep between jobs)
    assert ctl.requested and ctl._timer is None
    assert "SIGTERM: stopping; the jobs left are skipped" in capsys.readouterr().err
    seen = []
    with ctl.running(tmp_path, grace_s=60):
        seen.append((tmp_path / STOP_FILE).exists())  # a run that still starts stops at once
    assert seen == [True] and not (tmp_path / STOP_FILE).exists()


def test_the_grace_period_running_out_sends_the_second_signal(tmp_path, monkeypatch):
    sent: list[tuple[int, int]] = []
    fired = threading.Event()

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        fired.set()

    monkeypatch.setattr(stop.os, "kill", kill)
    ctl = StopControl()
    with ctl.running(tmp_path, grace_s=0.05):
        ctl._handle(signal.SIGINT, None)
        assert fired.wait(timeout=10), "the grace timer never fired"
    assert sent == [(stop.os.getpid(), signal.SIGINT)]


def test_a_folder_that_cannot_take_the_stop_file_stops_at_once(tmp_path):
    ctl = StopControl()
    gone = tmp_path / "gone"
    gone.mkdir()
    with ctl.running(gone, grace_s=60):
        gone.rmdir()  # the run's folder vanished: the ranks could never see a STOP file
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            ctl._handle(signal.SIGINT, None)


def test_install_handles_both_signals_once_and_only_in_the_main_thread(monkeypatch):
    installed: list[int] = []
    monkeypatch.setattr(stop.signal, "signal", lambda sig, handler: installed.append(sig))
    ctl = StopControl()
    worker = threading.Thread(target=ctl.install)
    worker.start()
    worker.join(timeout=10)
    assert installed == []  # Python's signal handlers belong to the main thread
    ctl.install()
    ctl.install()
    assert installed == [signal.SIGINT, signal.SIGTERM]
