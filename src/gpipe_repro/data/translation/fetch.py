"""Where translation data live: the offline data cache, and Debian packages fetched into it.

The parallel text ships inside Debian packages (``trans-de-en``, ``sword-text-*``) and so do the
apertium tools that make the labelled synthetic sources. ``_fetch(name)`` is the one place this
package gets them: the project's ``data.debian.fetch_package`` (``apt-get download`` + ``dpkg -x``
into ``$GPIPE_DATA_CACHE/debian/NAME``, nothing installed), with the hint every failure carries.
Parsed splits and vocabularies go to ``$GPIPE_DATA_CACHE/translation/<corpus>/``.
"""

from __future__ import annotations

from pathlib import Path

from ..debian import cache_root, fetch_package

__all__ = ["HINT", "cache_root", "translation_cache"]

HINT = (
    "give your own corpus with root=DIR (train/dev/test.<lang> text files, one sentence per line, "
    "line i of one language translating line i of the other)"
)


def translation_cache(name: str) -> Path:
    """The folder holding one corpus's parsed splits and vocabularies."""
    path = cache_root() / "translation" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fetch(name: str) -> Path:
    """The unpacked tree of Debian package ``name`` (its ``usr/...`` inside), fetched on first use."""
    return fetch_package(name, hint=HINT)
