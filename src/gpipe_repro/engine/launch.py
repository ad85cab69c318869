"""Start K x D ranks on this machine and get each rank's return value back.

Uses torch's elastic launcher (the library behind ``torchrun``): one process per rank, a c10d
rendezvous on a free loopback port, and a monitor that stops every rank as soon as one fails — so a
rank that raises ends the run within a bounded time and its message reaches the caller as a
:class:`RankError`. Across machines, run the same per-rank function under ``torchrun`` or SLURM
instead (see ``topology.init_topology``).

Ranks start from a fork server (``multiprocessing``'s ``forkserver``, where the platform has one):
a process that imported torch and the rank's modules once, forked for every rank of this and every
later launch of the same process (a sweep's jobs, a test worker's runs), instead of a fresh
interpreter importing them again per rank. What a fresh interpreter got by itself, each rank gets
explicitly: its launcher's environment of the moment (``_adopt``: a fork server's children inherit
the server's, taken when it started) with the variables the elastic agent set for it; the default
action of SIGTERM, SIGHUP and SIGQUIT (the server ignores them, so that a signal to the whole process
group — ``scancel``, a closed terminal — stops the ranks and not the process that reports on them);
and SIGTERM when its launcher dies (``_watch``: the parent whose death torch signals, with SIGINT,
is now the server, which outlives the launcher while a rank runs; SIGTERM, since a rank may ignore
SIGINT — a gpipe-run rank does, and so does any process started in the background by a
non-interactive shell). The working directory and ``sys.path`` come with ``multiprocessing``'s own
preparation data.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["RankError", "launch", "is_secondary", "START_METHOD"]

# Where the platform has no fork server (Windows), each rank is a fresh interpreter.
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
# The environment this module was imported under: in a fork server's child, the server's own.
_INHERITED_ENV = dict(os.environ)
# What torch's elastic agent sets for every rank it starts (LocalElasticAgent._start_workers), kept
# even where the server's stale environment happens to hold the same value; and its TORCHELASTIC_*.
_RANK_KEYS = frozenset(
    ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    + ("GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    + ("TORCH_NCCL_ASYNC_ERROR_HANDLING",)
)
# Signals sent to a whole process group that the fork server ignores and a rank does not.
_GROUP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

SECONDARY_DELAY_S = 3.0
# Failures that echo another rank's failure rather than cause one.
_SECONDARY = (
    "DistBackendError",
    "DistNetworkError",
    "DistError",
    "Connection closed by peer",
    "Connection reset by peer",
    "SIGTERM",
    "Signals.SIGTERM",
)


class RankError(RuntimeError):
    """A rank failed; ``str(err)`` is that rank's own error message."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


def is_secondary(err: BaseException) -> bool:
    """A communication failure that is most likely the echo of another rank's failure."""
    import torch.distributed as dist

    text = str(err)
    return isinstance(err, dist.DistError) or any(s in text for s in _SECONDARY)


def _ranked(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as err:
            if is_secondary(err):
                # Let the rank that failed first be reported: the monitor stops this one meanwhile.
                time.sleep(SECONDARY_DELAY_S)
            raise

    return wrapper


def _adopt(env: dict[str, str]) -> None:
    """Make this rank's environment ``env`` (its launcher's at the launch) plus the variables the
    elastic agent set for this rank: its rank's, and any that differ from what the process
    inherited."""
    own = {
        k: v
        for k, v in os.environ.items()
        if k in _RANK_KEYS or k.startswith("TORCHELASTIC_") or _INHERITED_ENV.get(k) != v
    }
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(own)


def _watch(launcher: int) -> None:
    """SIGTERM to this rank when its launcher process ends (killed by SIGKILL, by the OOM killer):
    nothing would collect its result."""
    try:
        fd = os.pidfd_open(launcher)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGTERM)
        return
    except (AttributeError, OSError):  # no pidfd here (not Linux, or a kernel before 5.3)
        return

    def wait() -> None:
        select.select([fd], [], [])  # readable once the process has ended
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="gpipe-launcher-watch", daemon=True).start()


def _entry(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    threads: int | None,
    env: dict[str, str],
    launcher: int,
) -> Any:
    import torch
    from torch.distributed.elastic.multiprocessing.errors import record

    if START_METHOD == "forkserver":
        for sig in _GROUP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        _adopt(env)
        _watch(launcher)
    if threads:
        torch.set_num_threads(threads)
    try:
        return record(_ranked(fn))(*args)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _start_server(fn: Callable[..., Any]) -> None:
    """Start this process's fork server unless it runs: preloaded with torch and the modules of
    ``fn``'s package and of this one that this process has imported (so that a rank imports almost
    nothing, not even for the script that started this process, which it runs again), and ignoring
    ``_GROUP_SIGNALS`` (a disposition the server inherits from this process, set while it starts)."""
    from multiprocessing import forkserver

    packages = {fn.__module__.split(".")[0], __name__.split(".")[0]}
    mine = sorted(
        m for m in list(sys.modules) if m.split(".")[0] in packages and not m.endswith("__main__")
    )
    # `mine` holds this module and fn's (named again for a fn whose module ends in __main__)
    preload = ["torch", "torch.distributed", *mine, fn.__module__]
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.getsignal(sig) for sig in _GROUP_SIGNALS} if main else {}
    if None in saved.values():  # a handler set outside Python: left alone
        saved = {}
    # The server is `python -c`, whose sys.path would start with the working directory of the
    # moment (a `grp.py` there would shadow the standard library's): PYTHONSAFEPATH (Python 3.11+)
    # keeps it off; a rank's own sys.path is its launcher's, as it would be in a fresh interpreter.
    safe = os.environ.get("PYTHONSAFEPATH")
    try:
        for sig in saved:
            signal.signal(sig, signal.SIG_IGN)
        os.environ["PYTHONSAFEPATH"] = "1"
        forkserver.ensure_running()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if safe is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = safe


def _split_failure(failure: Any) -> tuple[str, str]:
    msg = failure.message
    if isinstance(msg, dict):
        msg = msg.get("message", str(msg))
    lines = [ln for ln in str(msg).strip().splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else f"exited with code {failure.exitcode}"
    # `record` stores the traceback; its last line is "ExcType: message".
    head, sep, rest = last.partition(": ")
    if sep and head.replace(".", "").replace("_", "").isalnum():
        return head, rest
    return "", last


def _root_message(err: BaseException) -> tuple[int, str]:
    failures = getattr(err, "failures", None)
    if not failures:
        text = str(err).strip()
        return -1, text.splitlines()[-1] if text else repr(err)

    # The cause is the rank that failed by itself; its neighbours then fail on a closed
    # connection, or are stopped by the monitor (SIGTERM). A rank killed by another signal (SIGKILL
    # from outside, the kernel's OOM killer) is a cause. Timestamps have a one-second resolution.
    def key(item: tuple[int, Any]) -> tuple[bool, int, int]:
        rank, failure = item
        etype, msg = _split_failure(failure)
        stopped_by_monitor = failure.exitcode == -signal.SIGTERM
        secondary = any(s in etype or s in msg for s in _SECONDARY) or stopped_by_monitor
        return secondary, failure.timestamp, rank

    rank, failure = min(failures.items(), key=key)
    if failure.exitcode < 0 and failure.exitcode != -signal.SIGTERM:
        sig = signal.Signals(-failure.exitcode).name
        return rank, f"killed by signal {-failure.exitcode} ({sig})"
    return rank, _split_failure(failure)[1]


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...] = (),
    *,
    threads: int | None = None,
    monitor_interval: float = 0.1,
    log_dir: str | None = None,
    handle_signals: bool = True,
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` local ranks; return their results in rank order.

    ``fn`` must be importable (a module-level function) and should call ``init_topology``. Raises
    :class:`RankError` with the first failing rank's message. ``handle_signals=False`` leaves SIGINT
    and SIGTERM to the caller's own handlers (torch's agent would otherwise take them over for the
    launch and stop the ranks at once); a KeyboardInterrupt the caller raises still stops every rank.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("OMP_NUM_THREADS", str(threads or 1))
    if START_METHOD == "forkserver":
        _start_server(fn)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world_size,
        run_id=f"gpipe-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=monitor_interval,
        start_method=START_METHOD,
        logs_specs=DefaultLogsSpecs(log_dir=log_dir),
        signals_to_handle="SIGTERM,SIGINT,SIGHUP,SIGQUIT" if handle_signals else "SIGHUP,SIGQUIT",
    )
    # The launcher logs every failure with its traceback; the caller gets the message instead.
    quiet = [logging.getLogger(n) for n in ("torch.distributed.elastic", "torch.multiprocessing")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    # The agent installs its own handlers for these signals and leaves them installed: restore ours after.
    handlers = (
        {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        if threading.current_thread() is threading.main_thread()
        else {}
    )
    try:
        results = elastic_launch(config, _entry)(fn, args, threads, dict(os.environ), os.getpid())
    except Exception as err:  # ChildFailedError and rendezvous errors
        rank, msg = _root_message(err)
        raise RankError(rank, f"rank {rank}: {msg}" if rank >= 0 else msg) from None
    finally:
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return [results[r] for r in range(world_size)]
