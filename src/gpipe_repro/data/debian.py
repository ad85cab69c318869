"""Fetch a Debian package's files into the data cache without installing it (apt-get download, dpkg -x).

Some real datasets ship as Debian packages (``dataset-fashion-mnist``: the original idx files). On a
Debian machine ``apt-get download NAME`` fetches the archive as any user and ``dpkg -x`` unpacks it
into a folder of our choosing, so nothing is installed and no root is needed. The result lives in
``$GPIPE_DATA_CACHE/debian/NAME/`` (default ``~/.cache/gpipe-repro/data``), outside the repository.

Concurrency and crashes: a per-package lock file (``flock``, released by the kernel when its holder
dies) serialises fetches; each fetch works in a private temporary folder beside the target, writes a
marker file last and only then renames the folder into place (an atomic rename), so a folder under
the final name is always complete. A second call finds the marker and fetches nothing.

We do not run ``apt-get update`` ourselves: it rewrites the machine's package lists (root only, a
system-wide change and a network round trip) — a decision for the machine's owner, not a side effect
of loading a dataset. When the lists are missing the error says to run it.

The commands are looked up on ``PATH`` at call time (``shutil.which``), so tests put fake
``apt-get``/``dpkg`` scripts first on ``PATH``; every subprocess runs under a timeout.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import UserError

__all__ = ["MARKER", "cache_root", "fetch_package"]

MARKER = ".gpipe-complete"  # written last inside an extracted package: its presence means complete
DEFAULT_CACHE = "~/.cache/gpipe-repro/data"
LOCK_WAIT_S = 900.0  # another process may be fetching the same package: wait at most this long


def cache_root(cache: str | os.PathLike[str] | None = None) -> Path:
    """The data cache: ``cache`` if given, else ``$GPIPE_DATA_CACHE``, else ``~/.cache/gpipe-repro/data``."""
    chosen = cache if cache is not None else os.environ.get("GPIPE_DATA_CACHE") or DEFAULT_CACHE
    return Path(chosen).expanduser()


def _instead(name: str, hint: str | None) -> str:
    alt = f"download {name}'s .deb from https://packages.debian.org/{name} and run `dpkg -x FILE.deb DIR`"
    return f"{alt}, or {hint}" if hint else alt


def _run(cmd: list[str], cwd: Path, timeout_s: float, what: str, instead: str) -> str:
    # Own session, so a timeout stops the command's helpers too (apt-get forks its download methods).
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended just now
            pass
        proc.communicate(timeout=10)
        raise UserError(f"`{what}` did not finish within {timeout_s:.0f} s; {instead}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (err + out).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("E:")] or lines
        reason = errors[-1] if errors else "no message"
        raise UserError(f"`{what}` failed (exit {proc.returncode}): {reason}; {instead}")
    return out


def _tool(tool: str, name: str, instead: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise UserError(
            f"`{tool}` not found (needed to fetch the Debian package {name}): "
            f"on a machine without Debian's tools, {instead}"
        )
    return path


class _Lock:
    """An exclusive ``flock`` on ``path``, waited for at most ``wait_s`` seconds."""

    def __init__(self, path: Path, wait_s: float) -> None:
        self.path, self.wait_s = path, wait_s
        self.fd = -1

    def __enter__(self) -> _Lock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise UserError(
                        f"waited {self.wait_s:.0f} s for {self.path}: another process is "
                        "still fetching this package (remove the file if none is)"
                    ) from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def fetch_package(
    name: str,
    *,
    cache: str | os.PathLike[str] | None = None,
    hint: str | None = None,
    timeout_s: float = 600.0,
) -> Path:
    """The root of Debian package ``name`` extracted under ``<cache>/debian/<name>/``; fetched once.

    ``hint`` is the other way to provide the data (e.g. ``"set data.root=/path/with/the/idx/files"``);
    every failure is one :class:`UserError` line naming what failed and how to provide the data.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"name={name!r} is not a Debian package name")
    base = cache_root(cache) / "debian"
    target = base / name
    if (target / MARKER).is_file():
        return target
    instead = _instead(name, hint)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"cannot create the data cache {base}: {err.strerror}; set GPIPE_DATA_CACHE to "
            f"a writable folder, or {hint or 'provide the data another way'}"
        ) from None
    with _Lock(base / f".{name}.lock", LOCK_WAIT_S):
        if (target / MARKER).is_file():  # another process finished while we waited
            return target
        apt, dpkg = _tool("apt-get", name, instead), _tool("dpkg", name, instead)
        work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
        try:
            return _fetch_into(name, apt, dpkg, work, target, timeout_s, instead)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _fetch_into(
    name: str, apt: str, dpkg: str, work: Path, target: Path, timeout_s: float, instead: str
) -> Path:
    debs, tree = work / "deb", work / "tree"
    debs.mkdir()
    try:
        _run([apt, "download", name], debs, timeout_s, f"apt-get download {name}", instead)
    except UserError as err:
        if "Unable to locate package" in str(err) or "has no installation candidate" in str(err):
            raise UserError(
                f"`apt-get download {name}`: the package lists do not know {name}; run "
                f"`apt-get update` once (as root) and try again, or {instead}"
            ) from None
        raise
    found = sorted(debs.glob(f"{name}_*.deb")) or sorted(debs.glob("*.deb"))
    if not found:
        raise UserError(
            f"`apt-get download {name}` succeeded but left no .deb in {debs}; {instead}"
        )
    deb = found[0]
    _run([dpkg, "-x", str(deb), str(tree)], work, timeout_s, f"dpkg -x {deb.name}", instead)
    if not tree.is_dir():
        raise UserError(f"`dpkg -x {deb.name}` succeeded but extracted nothing; {instead}")
    (tree / MARKER).write_text(f"{deb.name}\n")  # last: marks the tree complete
    if target.exists():  # a stale folder without a marker (e.g. from an older layout): replace it
        stale = work / "stale"
        os.rename(target, stale)
    os.rename(tree, target)
    return target
