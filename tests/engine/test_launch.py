"""The launcher: a failing rank stops the run and its own message reaches the caller."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _workers as w
import pytest

from gpipe_repro.engine import RankError, launch
from gpipe_repro.engine.launch import START_METHOD


@pytest.mark.slow
def test_a_failing_rank_stops_the_run_with_its_message():
    t0 = time.monotonic()
    with pytest.raises(RankError, match="boom from the test rank") as err:
        launch(w.failing, 2, (2, 1))
    assert err.value.rank == 1
    assert time.monotonic() - t0 < 60


_LAUNCHES = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import _workers as w
from gpipe_repro.engine import launch

if __name__ == "__main__":  # a rank runs this script again, as __mp_main__
    keys = ["GPIPE_TEST_LAUNCH_ENV", "RANK", "LOCAL_RANK"]
    os.environ["GPIPE_TEST_LAUNCH_ENV"] = "first"
    os.environ["LOCAL_RANK"] = "1"  # a launcher that is itself some job's rank 1
    out = [launch(w.environment, 2, (keys,))]  # the fork server starts here, in this environment
    os.environ["GPIPE_TEST_LAUNCH_ENV"] = "second"
    os.environ["LOCAL_RANK"] = "5"
    os.chdir(sys.argv[2])
    out.append(launch(w.environment, 2, (keys,)))
    del os.environ["GPIPE_TEST_LAUNCH_ENV"]
    out.append(launch(w.environment, 2, (keys,)))
    print(json.dumps(out))
"""


def test_each_launch_runs_its_ranks_in_the_launchers_environment_of_that_moment(tmp_path):
    """Ranks fork from a server that started with the environment of an earlier moment (the
    process's first launch, in a fresh interpreter here): a variable set, changed or removed since,
    and the working directory reach every rank as they are now; the agent's own variables (RANK,
    LOCAL_RANK) stay each rank's, even where the server's stale value equals one of them; and the
    server does not import from the working directory it started in."""
    here = Path(__file__).parent
    script = tmp_path / "script" / "launcher.py"
    script.parent.mkdir()
    script.write_text(_LAUNCHES)
    # started in a folder holding a module named like one of the standard library's: the fork
    # server (`python -c`) must not import it (a fresh interpreter running the script would not)
    start = tmp_path / "start"
    start.mkdir()
    (start / "grp.py").write_text("raise RuntimeError('the working directory was on sys.path')\n")
    proc = subprocess.run(
        [sys.executable, str(script), str(here), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=start,
    )
    assert proc.returncode == 0, proc.stderr
    first, second, third = json.loads(proc.stdout.strip().splitlines()[-1])
    for got, want in ((first, "first"), (second, "second"), (third, None)):
        assert [r["env"]["GPIPE_TEST_LAUNCH_ENV"] for r in got] == [want, want]
        assert [(r["env"]["RANK"], r["env"]["LOCAL_RANK"]) for r in got] == [("0", "0"), ("1", "1")]
    assert all(r["cwd"] == str(tmp_path) for r in second + third)


@pytest.mark.skipif(START_METHOD != "forkserver", reason="this platform has no fork server")
def test_the_ranks_of_every_launch_fork_from_one_server_not_from_fresh_interpreters():
    """Two launches: every rank's parent is the same fork server (torch imported there once), not
    this process (which a fresh interpreter per rank would have as its parent)."""
    ranks = launch(w.environment, 2, ([],)) + launch(w.environment, 2, ([],))
    servers = {r["ppid"] for r in ranks}
    assert len(servers) == 1 and os.getpid() not in servers, ranks
    assert len({r["pid"] for r in ranks}) == 4


_SLEEPERS = """
import sys
sys.path.insert(0, sys.argv[1])
import _workers as w
from gpipe_repro.engine import launch

launch(w.sleeper, 2, (sys.argv[2], 300.0))
"""


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" in status.read_text().lower()
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_ranks_end_soon_after_their_launcher_is_killed(tmp_path):
    """SIGKILL of the launching process (the OOM killer, kill -9): its ranks end within seconds, the
    fork server with them — also when they ignore SIGINT (as torch's parent-death signal is, in a
    process that a non-interactive shell started in the background: the launcher here)."""
    here = Path(__file__).parent
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLEEPERS, str(here), str(tmp_path)],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # inherited, as by `cmd &`
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("[0-9]*"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the ranks did not start"
            time.sleep(0.1)
        ranks = [int(p.name) for p in tmp_path.glob("[0-9]*")]
        parents = {int(p.read_text()) for p in tmp_path.glob("[0-9]*")}
    finally:
        proc.kill()
    proc.wait(10)
    left = ranks + sorted(parents)
    deadline = time.monotonic() + 20
    try:
        while not all(_gone(p) for p in left):
            assert time.monotonic() < deadline, [(p, _gone(p)) for p in left]
            time.sleep(0.1)
    finally:  # nothing outlives the test
        for p in left:
            if not _gone(p):
                os.kill(p, signal.SIGKILL)
