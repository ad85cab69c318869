"""NCCL's ordering reproduced on gloo: a communicator runs its point-to-point operations one at a time.

NCCL runs every operation of a communicator on one CUDA stream, so an operation starts only after all
operations posted before it on that communicator have completed. With an eagerly initialised group
(``init_process_group(device_id=...)``, as ``topology`` does on CUDA) every unbatched send and receive
a rank posts on a process group goes through the group's one communicator, to whichever peer; a
batch (``batch_isend_irecv``) is one group call whose operations progress together. gloo runs each
operation on its own, so a rank that posts a receive ahead of a send its peer needs first works on
gloo and deadlocks on NCCL — which a CPU test would never see.

``Fifo`` makes gloo behave like NCCL: each process group of a rank gets one queue and one worker
thread, which issues the queued operations to gloo strictly one after another, starting the next
only once the previous one completed. gloo's sends complete only once the peer has posted the
matching receive (a rendezvous), so this is NCCL at its strictest: no send is absorbed by a buffer,
the case in which 1F1B deadlocks too. Selected by ``init_topology(nccl_order=True)`` or by the
environment variable ``GPIPE_NCCL_ORDER=1`` (which the ranks of a launch inherit); off by default,
since the hand-over to a thread costs time. Every wait is bounded: the worker's by the process group's
timeout, :meth:`FifoWork.wait` by ``timeout_s`` (it raises :class:`TimeoutError`).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

import torch.distributed as dist

__all__ = ["ENV", "Fifo", "FifoWork", "nccl_order_from_env"]

ENV = "GPIPE_NCCL_ORDER"
_ON = ("1", "true", "yes", "on")

Issue = Callable[
    [], list[dist.Work]
]  # posts one operation (or one batch) to gloo, returns its works


def nccl_order_from_env() -> bool:
    """Whether ``GPIPE_NCCL_ORDER`` asks for NCCL's ordering (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(ENV, "").strip().lower() in _ON


class FifoWork:
    """The handle of one queued operation: complete once it ran, in its turn, to completion."""

    __slots__ = ("_done", "_error", "_timeout_s", "_what")

    def __init__(self, what: str, timeout_s: float) -> None:
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._timeout_s = timeout_s
        self._what = what

    def _finish(self, error: BaseException | None = None) -> None:
        self._error = error
        self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self) -> bool:
        if not self._done.wait(self._timeout_s):
            raise TimeoutError(
                f"{self._what} did not complete within {self._timeout_s:g} s (NCCL order: every "
                "operation of a communicator waits for the ones posted before it)"
            )
        if self._error is not None:
            raise RuntimeError(f"{self._what} did not complete: {self._error}") from self._error
        return True


class Fifo:
    """One communicator of this rank: its operations run one after another, in posting order."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self._queue: queue.SimpleQueue[tuple[Issue, FifoWork]] = queue.SimpleQueue()
        self._broken: BaseException | None = None
        # Not a daemon: a daemon thread that returns from gloo while the interpreter finalises is
        # torn down inside C++ and aborts the process. This one ends once the main thread ended
        # and it is out of the backend (its wait is bounded by the process group's timeout).
        self._thread = threading.Thread(target=self._run, name=f"fifo-{name}")
        self._thread.start()

    def post(self, issue: Issue, what: str) -> FifoWork:
        """Queue ``issue`` behind everything posted before; returns its handle at once."""
        work = FifoWork(f"{what} on communicator {self.name}", self.timeout_s)
        self._queue.put((issue, work))
        return work

    def _run(self) -> None:
        main = threading.main_thread()
        while True:
            try:
                issue, work = self._queue.get(timeout=0.05)
            except queue.Empty:
                if not main.is_alive():
                    return
                continue
            if self._broken is not None:  # a communicator that failed stays failed, as NCCL's does
                work._finish(self._broken)
                continue
            try:
                for w in issue():
                    w.wait()  # bounded by the process group's timeout
            except BaseException as err:  # handed to whoever waits on this operation
                self._broken = err
                work._finish(err)
            else:
                work._finish()
