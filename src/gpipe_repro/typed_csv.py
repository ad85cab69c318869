"""Typed CSV rows: a report's CSV columns and their types come from its row dataclass, both ways.

``write_csv`` writes one column per field, in field order; ``read_csv`` reads the cells back into the
field's type (``int``, ``float``, ``bool``, ``str``, each optionally ``None`` = an empty cell) through
the project's one typed serialisation (``typed``: pydantic), so a report re-rendered from its CSV sees
the very values it was first rendered from. A number written as an integer reads back as one (also
in a float column), so a read and a write give the same bytes. A column the
file lacks reads as the field's default, or None (a CSV written before the column existed); a file
that also has columns the row does not know is another table, refused. A field named after a Python
keyword takes a trailing underscore (``pass_``), which its column drops (``pass``). A column added
to a row type after reports were made (a trailing field ``later()``: None by default) is written only
when some row has a value in it, so a report made before the column existed re-renders to the same
bytes.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import MISSING, Field, astuple, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, get_args, get_type_hints

from .typed import load

Row = TypeVar("Row")
_INT = re.compile(r"-?\d+")


def columns(row_type: type) -> list[str]:
    return [f.name.rstrip("_") for f in fields(row_type)]


LATER = "later"  # a field's metadata key: a column added after reports were made


def later() -> Any:
    """A trailing field added after reports were made: None by default, its column written only
    when some row has a value."""
    return field(default=None, metadata={LATER: True})


def written(row_type: type, rows: Sequence[Any]) -> int:
    """How many of ``row_type``'s columns ``write_csv`` writes for ``rows``: all but the trailing
    ``later()`` fields that are None in every row."""
    fs = fields(row_type)
    n = len(fs)
    while (
        n
        and fs[n - 1].metadata.get(LATER)
        and all(getattr(r, fs[n - 1].name) is None for r in rows)
    ):
        n -= 1
    return n


def write_csv(path: Path, row_type: type, rows: Sequence[Any]) -> None:
    n = written(row_type, rows)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns(row_type)[:n])
        w.writerows(["" if v is None else v for v in astuple(r)[:n]] for r in rows)


def read_csv(path: Path, row_type: type[Row]) -> list[Row]:
    """The rows of ``path``; a file that lacks a column of a field without a default and has columns
    the row does not know is another table, refused (ValueError) rather than read as empty cells."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        have = set(reader.fieldnames or ())
        required = [f.name.rstrip("_") for f in fields(row_type) if not _has_default(f)]  # type: ignore[arg-type]
        lacks = [c for c in required if c not in have]
        unknown = sorted(have - set(columns(row_type)))
        if lacks and unknown:  # not an older file of this table: another table
            raise ValueError(
                f"{path} is no {row_type.__name__} table: it lacks the column(s) "
                f"{', '.join(lacks)} and has {', '.join(unknown)}"
            )
        return [_row(raw, row_type) for raw in reader]


def _row(raw: dict[str, str], row_type: type[Row]) -> Row:
    row = load(row_type, _cells(raw, row_type))
    # a whole number in a float column was written from an int: it stays one, so it writes back
    # as it was (pydantic would make it 5.0)
    ints = {
        name: int(text)
        for name, t in get_type_hints(row_type).items()
        if float in (get_args(t) or (t,))
        and _INT.fullmatch(text := raw.get(name.rstrip("_")) or "")
    }
    return replace(row, **ints) if ints else row  # type: ignore[type-var]


def _has_default(f: Field[Any]) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _cells(raw: dict[str, str], row_type: type) -> dict[str, str | None]:
    """A line's cells as pydantic reads them into ``row_type``: the text, or None where it is empty
    (unless the field is a plain ``str``) or where the file lacks the column; a lacking column of a
    field with a default is left out (the default applies)."""
    out: dict[str, str | None] = {}
    for f in fields(row_type):
        text = raw.get(f.name.rstrip("_"))
        if text is None and _has_default(f):
            continue
        out[f.name] = None if text is None or (text == "" and f.type not in (str, "str")) else text
    return out
