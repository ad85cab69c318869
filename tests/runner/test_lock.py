"""A folder claimed by one run at a time (issue #36 finding 2): real processes race for it.

Processes forked here race for one folder's lock at the same instant (a barrier): exactly one claims
it, a live lock is never taken over, a stale one (its pid dead) is, once. The end-to-end tests (two
real ``gpipe-run`` processes into one folder): ``tests/runner/test_concurrent_runs.py``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

from gpipe_repro.runner import lock
from gpipe_repro.runner.folder import FolderInUse

RACERS = 6


def _race(folder, barrier, results, hold_s):
    barrier.wait(timeout=30)
    try:
        held = lock.acquire(folder, key="hydra.run.dir", say=lambda line: None)
    except FolderInUse as err:
        results.put((os.getpid(), "refused", str(err)))
        return
    results.put((os.getpid(), "claimed", held.took_over.pid if held.took_over else None))
    time.sleep(hold_s)  # hold it while the others try
    held.release()


def _racers(folder, n=RACERS, hold_s=1.0):
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(folder, barrier, results, hold_s)) for _ in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return out


def test_of_processes_racing_for_one_folder_exactly_one_claims_it(tmp_path):
    out = _racers(tmp_path / "run")
    claimed = [o for o in out if o[1] == "claimed"]
    assert len(claimed) == 1, out
    winner = claimed[0][0]
    for _, _, msg in (o for o in out if o[1] == "refused"):
        assert msg.count("\n") == 0 and str(tmp_path / "run") in msg
        assert f"pid {winner}" in msg and "is in use by another run" in msg
        assert "hydra.run.dir=..." in msg
    assert not (tmp_path / "run" / lock.RUN_LOCK).exists()  # removed at the end


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)
    return p.pid


def _stale(folder, pid):
    folder.mkdir(parents=True, exist_ok=True)
    stale = lock.Holder(
        "deadbeef0001", pid, os.uname().nodename, "2026-01-01T00:00:00", "gpipe-run"
    )
    (folder / lock.RUN_LOCK).write_text(json.dumps(stale.__dict__))


def test_a_stale_lock_is_taken_over_and_said_so(tmp_path):
    dead = _dead_pid()
    _stale(tmp_path, dead)
    said = []
    held = lock.acquire(tmp_path, say=said.append)
    assert held.took_over is not None and held.took_over.pid == dead
    assert len(said) == 1 and "took over the lock" in said[0] and f"pid {dead}" in said[0]
    assert json.loads((tmp_path / lock.RUN_LOCK).read_text())["pid"] == os.getpid()
    held.release()
    assert not (tmp_path / lock.RUN_LOCK).exists()


def test_processes_racing_to_take_over_a_stale_lock_never_both_win(tmp_path):
    _stale(tmp_path / "run", _dead_pid())
    out = _racers(tmp_path / "run")
    assert sum(o[1] == "claimed" for o in out) == 1, out


def test_a_live_lock_is_never_taken_over_and_a_claim_is_counted_not_repeated(tmp_path):
    held = lock.acquire(tmp_path)
    again = lock.acquire(tmp_path)  # gpipe-run claims before Hydra, the runner again
    assert again is held and held.count == 2
    again.release()
    assert (tmp_path / lock.RUN_LOCK).exists()  # still held once
    held.release()
    assert not (tmp_path / lock.RUN_LOCK).exists()
