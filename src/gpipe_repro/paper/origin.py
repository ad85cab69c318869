"""Which artefact a results CSV belongs to: ``--from`` another artefact's CSV is one line naming it.

A CSV's columns are its row type's (``typed_csv``), so they tell the artefact apart — except where
several share a row type (every sweep's table, the demo's among them, is a ``SweepRow`` table): then
the ``provenance.json`` beside it tells which command made it (``gpipe-run -m experiment=NAME``, or
``python -m gpipe_repro.paper NAME``). ``mismatch`` is what ``python -m gpipe_repro.paper NAME --from
CSV`` asks before reading a row: None where the CSV is NAME's (or is no artefact's at all: reading it
then names the columns it lacks), else the line.
"""

from __future__ import annotations

import csv
import shlex
from pathlib import Path
from typing import Any

from ..typed_csv import columns
from .artefact import Artefact
from .provenance import FILE, Provenance

__all__ = ["mismatch", "made_by"]

SWEEP = "sweep"  # the artefact that takes any sweep's table


def _header(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return next(csv.reader(f), [])


def made_by(command: str, artefacts: dict[str, Artefact[Any]]) -> str | None:
    """The artefact whose command made a report (``provenance.json``'s), or None: ``python -m
    gpipe_repro.paper NAME`` -> NAME; ``gpipe-run -m ... experiment=NAME`` -> NAME; any other sweep
    -> ``sweep``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:3] == ["python", "-m", "gpipe_repro.paper"] and len(words) > 3:
        return words[3] if words[3] in artefacts else None
    if words[:1] == ["gpipe-run"]:
        exp = next((w.split("=", 1)[1] for w in words if w.startswith("experiment=")), None)
        return exp if exp in artefacts else SWEEP
    return None


def _fits(have: set[str], row: type) -> bool:
    """Whether a CSV with columns ``have`` is a table of ``row``: no column the row does not know
    (an older file of the row's table may lack a newer column, as ``rows.read_csv`` reads it)."""
    return bool(have) and have <= set(columns(row))


def mismatch(name: str, path: Path, artefacts: dict[str, Artefact[Any]]) -> str | None:
    """One line when the CSV at ``path`` is not artefact ``name``'s, naming the one it belongs to;
    None when it is (or nothing tells)."""
    have = set(_header(path))
    exact = [n for n, a in artefacts.items() if set(columns(a.row)) == have]
    fits = exact or [n for n, a in artefacts.items() if _fits(have, a.row)]
    prov = Provenance.load(path.parent) if (path.parent / FILE).exists() else None
    command = prov.command if prov is not None else None
    maker = made_by(command, artefacts) if command else None
    if name in fits and (name == SWEEP or maker in (None, name)):
        return None
    if not fits:  # no artefact's: read_csv names the columns it lacks and has
        return None
    # several artefacts share a row type (every sweep's table): the command that made it decides
    owner = maker if maker in fits else SWEEP if SWEEP in fits else fits[0]
    made = f" (made by `{command}`)" if command else ""
    whose = "a sweep's table" if owner == SWEEP else f"{owner}'s table"
    return (
        f"--from {path} is {whose}{made}, not {name}'s; re-render it with "
        f"`python -m gpipe_repro.paper {owner} --from {path}`"
    )
