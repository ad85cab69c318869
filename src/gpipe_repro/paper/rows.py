"""Typed CSV rows: a report's CSV columns and their types come from its row dataclass, both ways.

``write_csv`` writes one column per field, in field order; ``read_csv`` reads the cells back into the
field's type (``int``, ``float``, ``bool``, ``str``, each optionally ``None`` = an empty cell), so a
report re-rendered from its CSV sees the very values it was first rendered from. A number written as
an integer reads back as one, so a read and a write give the same bytes. A column the file lacks
reads as None (a CSV written before the column existed); a file that also has columns the row does
not know is another table, refused. A field named after a Python keyword takes a
trailing underscore (``pass_``), which its column drops (``pass``).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from dataclasses import MISSING, astuple, fields
from pathlib import Path
from typing import Any, TypeVar, get_args, get_type_hints

Row = TypeVar("Row")
_INT = re.compile(r"-?\d+")


def columns(row_type: type) -> list[str]:
    return [f.name.rstrip("_") for f in fields(row_type)]


def write_csv(path: Path, row_type: type, rows: Sequence[Any]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns(row_type))
        w.writerows(["" if v is None else v for v in astuple(r)] for r in rows)


def _number(text: str) -> float:
    return int(text) if _INT.fullmatch(text) else float(text)


def _parser(annotation: Any) -> tuple[Callable[[str], Any], bool]:
    """How a cell of this type is read, and whether an empty cell is None."""
    kinds = set(get_args(annotation)) or {annotation}
    optional = type(None) in kinds
    (kind,) = kinds - {type(None)}
    readers: dict[type, Callable[[str], Any]] = {
        bool: lambda v: v == "True",
        int: int,
        float: _number,
        str: str,
    }
    read = readers[kind]
    return read, optional or kind is not str


def read_csv(path: Path, row_type: type[Row]) -> list[Row]:
    """The rows of ``path``; a file that lacks a column of a field without a default and has columns
    the row does not know is another table, refused (ValueError) rather than read as empty cells."""
    parsers = {name: _parser(t) for name, t in get_type_hints(row_type).items()}
    out = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        have = set(reader.fieldnames or ())
        required = [
            f.name.rstrip("_")
            for f in fields(row_type)  # type: ignore[arg-type]
            if f.default is MISSING and f.default_factory is MISSING
        ]
        lacks = [c for c in required if c not in have]
        unknown = sorted(have - set(columns(row_type)))
        if lacks and unknown:  # not an older file of this table: another table
            raise ValueError(
                f"{path} is no {row_type.__name__} table: it lacks the column(s) "
                f"{', '.join(lacks)} and has {', '.join(unknown)}"
            )
        for raw in reader:
            values = {}
            for name, (read, empty_is_none) in parsers.items():
                cell = raw.get(name.rstrip("_"))
                values[name] = (
                    None if cell is None or (cell == "" and empty_is_none) else read(cell)
                )
            out.append(row_type(**values))
    return out
