"""NCCL's ordering on gloo: a communicator's operations run one at a time, in posting order — and
under it the engine as it was (every channel on one group, receives posted ahead of sends) hangs."""

import threading
import time

import _workers as w
import pytest

from gpipe_repro.engine import RankError, launch
from gpipe_repro.engine.fifo import Fifo, nccl_order_from_env


class FakeWork:
    """A backend operation that completes (or fails) when the test says so; bounded, as the
    backend's own wait is, so no thread outlives the test."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name
        self.done = threading.Event()
        self.error: str | None = None

    def wait(self) -> bool:
        if not self.done.wait(5.0) or self.error:
            raise RuntimeError(self.error or f"{self.name} timed out")
        self.log.append(f"{self.name} complete")
        return True


def poster(log: list[str], work: FakeWork):
    def issue() -> list[FakeWork]:
        log.append(f"{work.name} started")
        return [work]

    return issue


def test_each_operation_starts_only_after_the_previous_one_completed():
    log: list[str] = []
    fifo = Fifo("test", timeout_s=5.0)
    a, b = FakeWork(log, "a"), FakeWork(log, "b")
    wa, wb = fifo.post(poster(log, a), "a"), fifo.post(poster(log, b), "b")
    time.sleep(0.2)  # room for the worker to (wrongly) start b
    assert log == ["a started"] and not wa.is_completed() and not wb.is_completed()
    b.done.set()  # b's peer is ready, but b has not even started: a is in front of it
    time.sleep(0.2)
    assert log == ["a started"] and not wb.is_completed()
    a.done.set()
    assert wb.wait() and wa.is_completed()
    assert log == ["a started", "a complete", "b started", "b complete"]


def test_a_wait_is_bounded_and_a_failed_communicator_fails_what_follows():
    log: list[str] = []
    fifo = Fifo("test", timeout_s=1.0)
    stuck, later = FakeWork(log, "stuck"), FakeWork(log, "later")
    w_stuck = fifo.post(poster(log, stuck), "receive from rank 1")
    w_later = fifo.post(poster(log, later), "send to rank 1")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="receive from rank 1 on communicator test did not "):
        w_stuck.wait()
    assert 0.9 < time.monotonic() - t0 < 4.0
    stuck.error = "connection closed"  # the backend gives up on it: the communicator is broken
    stuck.done.set()
    with pytest.raises(RuntimeError, match="send to rank 1 on .* complete: connection closed"):
        w_later.wait()
    assert "later started" not in log  # what was queued behind failed without starting


def test_the_mode_is_off_unless_the_environment_turns_it_on(monkeypatch):
    monkeypatch.delenv("GPIPE_NCCL_ORDER", raising=False)
    assert not nccl_order_from_env()
    for on in ("1", "true", "YES"):
        monkeypatch.setenv("GPIPE_NCCL_ORDER", on)
        assert nccl_order_from_env()
    monkeypatch.setenv("GPIPE_NCCL_ORDER", "0")
    assert not nccl_order_from_env()


TIMEOUT_S = 3.0


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_engine_on_one_group_hangs_in_nccl_order(schedule):
    """K = 2, M = 4 with every channel on the default group (the engine before channels): stage 0
    posts the gradient receives ahead of its remaining activation sends on the one communicator,
    stage 1 waits for those activations — a deadlock, ended here by the short timeout. The same
    engine on plain gloo, and the engine with its channels in this order, complete: see
    ``test_pipeline``."""
    cfg = dict(M=4, checkpoint="except_last", schedule=schedule, balance=[3, 5])
    t0 = time.monotonic()
    with pytest.raises(RankError, match="on communicator default group did not complete"):
        launch(
            w.grid,
            2,
            (2, [dict(cfg, nccl_order=True, one_group=True, timeout_s=TIMEOUT_S)]),
            threads=1,
        )
    assert time.monotonic() - t0 < 30
