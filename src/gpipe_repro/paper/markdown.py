"""How a page shows its numbers: the one Markdown-table function and one formatter per kind of number.

Every table of every page goes through ``table``; every percentage, duration, size and ratio through
the formatters below, which print a missing value (None) as a dash. The page templates
(``template``) get them as Jinja2 filters of the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

DASH = "—"
MiB, GiB = 2**20, 2**30


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table: the header, its rule, one line per row (each cell as ``str`` gives it; an
    empty cell stays empty)."""

    def line(cells: Sequence[Any]) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    return "\n".join([line(head), "|" + "---|" * len(head), *map(line, rows)])


def num(x: float | None, spec: str = ".2f") -> str:
    """``x`` formatted by ``spec``; a dash for None."""
    return DASH if x is None else format(x, spec)


def pct(x: float | None, digits: int = 1, signed: bool = False) -> str:
    """A share as a percentage (0.123 -> 12.3%, signed: +12.3%); a dash for None."""
    return num(x, f"{'+' if signed else ''}.{digits}%")


def ms(seconds: float | None, digits: int = 1) -> str:
    """Seconds in milliseconds, without the unit; a dash for None."""
    return DASH if seconds is None else f"{1e3 * seconds:.{digits}f}"


def us(seconds: float | None) -> str:
    """Seconds in whole microseconds, without the unit; a dash for None."""
    return DASH if seconds is None else f"{1e6 * seconds:.0f}"


def mib(nbytes: float | None, digits: int = 2) -> str:
    """Bytes in MiB, without the unit; a dash for None."""
    return DASH if nbytes is None else f"{nbytes / MiB:.{digits}f}"


def gib(nbytes: float | None) -> str:
    """Bytes in GiB, with the unit; a dash for None."""
    return DASH if nbytes is None else f"{nbytes / GiB:.2f} GiB"


def ratio(a: float | None, b: float | None) -> str:
    """a / b as a factor (1.23×); a dash where either is missing or zero."""
    return DASH if not a or not b else f"{a / b:.2f}×"


def yes(flag: bool | None, no: str = "**no**") -> str:
    """yes, ``no`` (bold by default) or a dash for None."""
    return DASH if flag is None else "yes" if flag else no
