"""Stopping is stopping: SIGINT (Ctrl-C) or SIGTERM to the process that owns the runs.

The first signal asks the current run to stop after the step it is in: the run's folder gets a
``STOP`` file, which every rank looks at once per step and agrees on (``rank.parts.StopVote``), so
they all stop after the same step, write a save when saves are on, and report what they measured as
an ``interrupted`` run; the rest of a sweep is skipped and the finished jobs are gathered. A second signal,
or the run's grace period (``train.stop_grace_s``) running out, stops it at once (KeyboardInterrupt):
the ranks are terminated and the run is still written as ``interrupted`` with the steps the last stage
had reported. The ranks ``gpipe-run`` starts ignore SIGINT themselves: the terminal sends Ctrl-C to the
whole process group, and the decision is the driver's.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from ..rank import STOP_FILE

__all__ = ["StopControl", "STOP"]


class StopControl:
    def __init__(self) -> None:
        self.requested = False
        self._run: Path | None = None
        self._grace_s = 60.0
        self._timer: threading.Timer | None = None
        self._installed = False

    def install(self) -> None:
        """Handle SIGINT and SIGTERM in this (main) thread from now on."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        self._installed = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            self._cancel_timer()
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
        self.requested = True
        name = signal.Signals(signum).name
        if self._run is None:
            print(
                f"gpipe-run: {name}: stopping; the jobs left are skipped",
                file=sys.stderr,
                flush=True,
            )
            return
        try:
            (self._run / STOP_FILE).touch()
        except OSError:
            raise KeyboardInterrupt(f"signal {name}") from None
        print(
            f"gpipe-run: {name}: stopping after the current step (at most {self._grace_s:.0f} s; "
            "again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
        self._timer = threading.Timer(self._grace_s, lambda: os.kill(os.getpid(), signal.SIGINT))
        self._timer.daemon = True
        self._timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @contextmanager
    def running(self, out: Path, grace_s: float) -> Iterator[None]:
        """A run is under way in ``out``: a first signal stops it after its current step."""
        self._run, self._grace_s = out, grace_s
        try:
            (out / STOP_FILE).unlink(missing_ok=True)
        except OSError:
            pass
        if self.requested:  # asked before this run started: it stops after its first step
            (out / STOP_FILE).touch()
        try:
            yield
        finally:
            self._run = None
            self._cancel_timer()
            try:
                (out / STOP_FILE).unlink(missing_ok=True)
            except OSError:
                pass


STOP = StopControl()
