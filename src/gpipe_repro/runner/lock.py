"""A folder claimed by one run at a time: a lock file created exclusively, before anything is written.

``acquire`` creates ``<folder>/run.lock`` (a sweep: ``sweep.lock``) with ``O_CREAT | O_EXCL`` — of two
processes that try at once, exactly one creates it — holding who holds it: the run's id, its pid
(and the pid's start time, so a recycled pid is not taken for the run), the host, when it started
and its command. A second run finds the file and is refused in one line naming the folder and the
run that holds it (``FolderInUse``). The holder removes the file when it ends (``release``; the
process's exit releases whatever it still holds). A lock left by a process that died without
releasing it (SIGKILL, a power cut) is *stale*: the next run takes it over and says so. A lock from
another host cannot be checked and is never taken over; the line says which file to delete once
that run is known to be gone.

Taking over is itself exclusive: under a short-lived ``<lock>.takeover`` file (``O_EXCL`` too) the
stale file is removed only if it still holds the dead run, then created afresh exclusively — so
two runs finding the same stale lock never both win. A process may claim a folder it already holds
(gpipe-run claims it before Hydra writes, the runner again): the claim is counted, not repeated.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from ..errors import UserError
from .folder import FolderInUse

__all__ = ["Holder", "Lock", "acquire", "release_all", "held", "RUN_LOCK", "SWEEP_LOCK"]

RUN_LOCK = "run.lock"
SWEEP_LOCK = "sweep.lock"
_WAIT_S = (
    2.0  # how long a lock file may stay empty (its creator writing it) before it is read as torn
)


class FolderUnusable(UserError):
    """The folder cannot be created or written: ``str`` is the one line (what failed, and why)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what its file says."""

    run: str
    pid: int
    host: str
    started: str
    command: str
    pid_start: str | None = None  # the pid's start time (Linux), so a recycled pid is told apart

    def words(self) -> str:
        where = "" if self.host == socket.gethostname() else f" on host {self.host}"
        return f"run {self.run}, pid {self.pid}{where}, started {self.started}: {self.command}"


@dataclass
class Lock:
    """A lock this process holds (``count``: how many claims of it are open)."""

    path: Path
    holder: Holder
    took_over: Holder | None = None
    count: int = 1

    def set_run(self, run: str) -> None:
        """Record the run's id once it is known (a resumed run keeps its folder's id)."""
        if run == self.holder.run:
            return
        self.holder = Holder(**{**asdict(self.holder), "run": run})
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self.holder)) + "\n")
        os.replace(tmp, self.path)  # the file never disappears: the folder stays claimed

    def release(self) -> None:
        if self.holder.pid != os.getpid():  # a forked child's copy: the parent's lock
            return
        self.count -= 1
        if self.count > 0:
            return
        _HELD.pop(self.path, None)
        if _read(self.path) == self.holder:  # never remove a file that is not ours
            self.path.unlink(missing_ok=True)


_HELD: dict[Path, Lock] = {}


def held(folder: Path, name: str = RUN_LOCK) -> Lock | None:
    """The lock on ``folder`` this process holds, or None."""
    return _HELD.get(Path(folder).absolute() / name)


def _pid_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (Linux ``/proc``), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(h: Holder) -> bool:
    """Whether the holder may still run (another host's: cannot be told, so yes)."""
    if h is TORN or h.pid <= 0:
        return False
    if h.host != socket.gethostname():
        return True
    try:
        os.kill(h.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return h.pid_start is None or _pid_start(h.pid) in (None, h.pid_start)


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _parse(text: str | None) -> Holder | None:
    try:
        return Holder(**json.loads(text or ""))
    except (ValueError, TypeError):
        return None


def _read(path: Path) -> Holder | None:
    return _parse(_text(path))


def _create(path: Path, holder: Holder) -> bool:
    """Create ``path`` exclusively holding ``holder``; False when it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(asdict(holder)) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return True


TORN = Holder("?", 0, socket.gethostname(), "?", "(a lock file its writer never finished)")


def _holder_of(path: Path) -> tuple[Holder, str] | None:
    """The holder in an existing lock file and the file's text; None when it is gone. A file that
    stays empty or torn longer than a writer needs was left by a holder that died writing it."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        text = _text(path)
        if text is None:
            return None
        h = _parse(text)
        if h is not None:
            return h, text
        if time.monotonic() > deadline:
            return TORN, text
        time.sleep(0.02)


def _take_over(path: Path, stale_text: str) -> None:
    """Remove ``path`` if it still holds what the stale holder wrote, under the exclusive takeover
    file (so two runs finding one stale lock never remove each other's new one)."""
    guard = path.with_name(path.name + ".takeover")
    me = Holder(uuid.uuid4().hex[:12], os.getpid(), socket.gethostname(), _now(), "takeover")
    if not _create(guard, me):
        other = _read(guard)
        if other is None or not _alive(other):
            guard.unlink(missing_ok=True)  # a taker that died mid-takeover
        time.sleep(0.02)
        return
    try:
        if _text(path) == stale_text:
            path.unlink(missing_ok=True)
    finally:
        guard.unlink(missing_ok=True)


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


def acquire(
    folder: Path,
    *,
    name: str = RUN_LOCK,
    key: str | None = "hydra.run.dir",
    run: str | None = None,
    command: str | None = None,
    say: Callable[[str], None] | None = None,
) -> Lock:
    """Claim ``folder`` (created if missing) for this process. Raises ``FolderInUse`` (one line
    naming the folder and the run holding it; ``key``: the option that chooses another folder) or
    ``FolderUnusable`` (the folder cannot be created or written). A stale lock is taken over and
    ``say`` (default: stderr) is told."""
    folder = Path(folder).absolute()
    path = folder / name
    mine = _HELD.get(path)
    if mine is not None:
        mine.count += 1
        return mine
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FolderUnusable(f"cannot create {folder}: {err.strerror or err}") from None
    holder = Holder(
        run or uuid.uuid4().hex[:12],
        os.getpid(),
        socket.gethostname(),
        _now(),
        command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        _pid_start(os.getpid()),
    )
    took_over: Holder | None = None
    for _ in range(200):  # each round ends with a claim, a refusal or a stale lock removed
        try:
            if _create(path, holder):
                lock = Lock(path, holder, took_over)
                _HELD[path] = lock
                if took_over is not None:
                    (say or _stderr)(
                        f"{folder}: took over the lock of a run that is no longer running "
                        f"({took_over.words()})"
                    )
                return lock
        except OSError as err:
            raise FolderUnusable(f"cannot write in {folder}: {err.strerror or err}") from None
        found = _holder_of(path)
        if found is None:
            continue  # released meanwhile: try again
        other, text = found
        if _alive(other):
            gone = f"; if it is gone, delete {path}" if other.host != holder.host else ""
            where = f" ({key}=...)" if key else ""
            raise FolderInUse(
                f"{folder} is in use by another run ({other.words()}); wait for it to end, or "
                f"run in another folder{where}{gone}"
            )
        took_over = other
        _take_over(path, text)
    raise FolderInUse(f"{folder}: could not claim {path} (it keeps changing hands)")


def release_all() -> None:
    """Release every lock this process holds (at its end)."""
    for lock in list(_HELD.values()):
        lock.count = 1
        lock.release()


def _stderr(line: str) -> None:
    print(f"gpipe-run: {line}", file=sys.stderr, flush=True)


atexit.register(release_all)
