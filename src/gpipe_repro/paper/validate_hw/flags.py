"""Which cells of a table rest on a hardware profile not anchored well enough, from a validate-hw report.

A table simulated on a published profile (Tables 2 and 3, GPipe §3) marks every cell whose profile
``profiles.problems`` judges unanchored for its model's input, reading the report's ``devices.csv``
and ``cpu.csv``: the same decision, made by the same function, never a second copy of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ...typed_csv import read_csv
from ..provenance import Provenance
from .hw_rows import CpuRow
from .profiles import DeviceSummary, kinds, problems
from .uses import INPUTS

MARK = "†"  # beside a cell whose profile is not anchored well enough for it


@dataclass(frozen=True)
class Anchoring:
    """The judgement of a table's (model, hardware) pairs: why each unanchored one is, and where
    the judgement comes from (``where`` empty: no validate-hw report, nothing judged)."""

    where: str = ""
    why: dict[tuple[str, str], str] = field(default_factory=dict)

    def mark(self, model: str, hardware: str) -> str:
        """The mark beside a cell of ``model`` simulated on ``hardware`` (empty: none)."""
        return MARK if (model, hardware) in self.why else ""


def anchoring(pairs: Iterable[tuple[str, str]], report: Path) -> Anchoring:
    """Judge every (model, hardware profile) of ``pairs`` by the validate-hw report in ``report``
    (``devices.csv``, ``cpu.csv`` when it ran the CPU check); no report: nothing judged."""
    from ...models import MODELS

    if not (report / "devices.csv").exists():
        return Anchoring()
    by_name = {s.device: s for s in read_csv(report / "devices.csv", DeviceSummary)}
    cpu = kinds(read_csv(report / "cpu.csv", CpuRow)) if (report / "cpu.csv").exists() else []
    why = {}
    for model, hw in sorted(set(pairs)):
        fed = INPUTS[MODELS[model].data_kind]
        found = problems(by_name.get(hw), hw, fed, cpu)
        if found:
            why[(model, hw)] = f"{model} (fed {fed}) on {hw}: " + "; ".join(found)
    commits = ", ".join(Provenance.load(report).commits) or "?"
    return Anchoring(f"`make validate-hw` ({report}/hw.md, commit {commits})", why)
