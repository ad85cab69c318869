"""Where translation data live: the offline cache, and Debian packages fetched into it unpacked.

The parallel text ships inside Debian packages (``trans-de-en``, ``sword-text-*``) and so do the
apertium tools that make the labelled synthetic sources. ``_fetch(name)`` downloads a package's
archive once with ``apt-get download`` and unpacks it with ``dpkg -x`` into
``$GPIPE_DATA_CACHE/debian/NAME`` (default ``~/.cache/gpipe-repro/data``), without installing
anything. It is private on purpose: the project's shared ``data.debian.fetch_package`` does the same
and can replace it behind this one function.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import UserError

__all__ = ["cache_root", "translation_cache"]

_DONE = ".complete"


def cache_root() -> Path:
    """The data cache: ``$GPIPE_DATA_CACHE`` or ``~/.cache/gpipe-repro/data``."""
    return Path(os.environ.get("GPIPE_DATA_CACHE", "~/.cache/gpipe-repro/data")).expanduser()


def translation_cache(name: str) -> Path:
    """The folder holding one corpus's parsed splits and vocabularies."""
    path = cache_root() / "translation" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _fetch(name: str) -> Path:
    """The unpacked tree of Debian package ``name`` (its ``usr/...`` inside), fetched on first use."""
    dest = cache_root() / "debian" / name
    if (dest / _DONE).exists():
        return dest
    apt, dpkg = shutil.which("apt-get"), shutil.which("dpkg")
    if apt is None or dpkg is None:
        raise UserError(
            f"the Debian package {name} is not unpacked in {dest} and this machine has no "
            f"apt-get/dpkg to fetch it; unpack its .deb there with `dpkg -x {name}_*.deb {dest}` "
            f"and create {dest / _DONE}"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{name}-") as tmp:
        try:
            got = subprocess.run(
                [apt, "download", name], cwd=tmp, capture_output=True, text=True, timeout=600
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                f"`apt-get download {name}` took over 600 s; check the network"
            ) from None
        debs = sorted(Path(tmp).glob(f"{name}_*.deb"))
        if got.returncode != 0 or not debs:
            raise UserError(
                f"`apt-get download {name}` failed ({_last_line(got.stderr)}); run `apt-get update` "
                f"as root, or unpack {name}'s .deb into {dest} yourself"
            )
        tree = Path(tmp) / "tree"
        tree.mkdir()
        unpacked = subprocess.run(
            [dpkg, "-x", str(debs[0]), str(tree)], capture_output=True, text=True, timeout=600
        )
        if unpacked.returncode != 0:
            raise UserError(f"`dpkg -x {debs[0].name}` failed: {_last_line(unpacked.stderr)}")
        (tree / _DONE).write_text(debs[0].name + "\n")
        shutil.rmtree(dest, ignore_errors=True)  # a partial tree from an interrupted run
        os.replace(tree, dest)
    return dest
