"""``reports/gpu/results.csv``: what ``make gpu-check`` measured, one number a row (long form: the
steps' tables have columns of their own, so the file is step, case, quantity, value)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GpuCheckRow", "long_rows"]


@dataclass(frozen=True)
class GpuCheckRow:
    step: str  # the gpu-check step (tests, tf32, cells, profiles, engine)
    case: str  # the row's first column: the test, run, cell, experiment or variant
    quantity: str  # the column's name
    value: str  # as the step wrote it ('' for none)


def long_rows(outputs: Mapping[str, Mapping[str, Any]]) -> list[GpuCheckRow]:
    """Each step's rows, one number each; a row's first column names its case."""
    rows = []
    for step, got in outputs.items():
        for r in got["rows"]:
            items = list(r.items())
            case = str(items[0][1]) if items else ""
            rows += [GpuCheckRow(step, case, k, "" if v is None else str(v)) for k, v in items[1:]]
    return rows
