"""Every claim of the paper, as data (``claims.yaml``), each judged by its rule from one report's files.

A claim's judge is a function of one of ``MODULES`` that reads that report's files alone, so the
report's page (its first lines: ``answers``) and the scorecard (``paper.scorecard``) give the same
verdict from any copy of the report. The modules are imported on first use, so an artefact's page
code can import this package and a judge's module the artefact's row types. A judge that finds no
rows to judge raises ``Missing``: the claim is then *not testable here*, with that line as reason.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ...typed_csv import Row, read_csv
from ..template import words
from ..verdict import RULES, UNTESTABLE, Finding

MODULES = ("algorithm", "table1", "throughput", "transfer", "translation")
DATA = Path(__file__).with_name("claims.yaml")


class Missing(Exception):
    """The report's rows lack what a claim is judged on (one line: what)."""


def results(folder: Path, row: type[Row], name: str = "results.csv") -> list[Row]:
    """The report's ``name`` read as ``row``s; ``Missing`` where the report has none."""
    path = folder / name
    if not path.exists():
        raise Missing(f"no {name}")
    return read_csv(path, row)


def worded(name: str, judge: str, verdict: str, **c: Any) -> Finding:
    """A judge's finding worded by ``templates/<name>.md.j2``: its macros ``<judge>_ours`` and
    ``<judge>_reason``, each called with the numbers ``c``."""
    ours, reason = (words(name, f"{judge}_{part}", c=c) for part in ("ours", "reason"))
    return Finding(verdict, ours, reason)


@dataclass(frozen=True)
class Claim:
    """One entry of ``claims.yaml`` (its header names the fields)."""

    key: str
    section: str
    statement: str
    paper: str
    report: str
    page: str
    heading: str
    rows: str
    rule: str
    judge: str
    args: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"claim {self.key}: rule {self.rule!r} is none of {', '.join(RULES)}")
        if _function(self.judge) is None:
            raise ValueError(
                f"claim {self.key}: judge {self.judge!r} is no function of {', '.join(MODULES)}"
            )

    @property
    def link(self) -> str:
        """The page's section, relative to ``reports/``."""
        return f"{self.report}/{self.page}#{anchor(self.heading)}"

    def find(self, folder: Path) -> Finding:
        """The verdict from the files in ``folder`` (the report's own, or where it is rendered)."""
        judge = _function(self.judge)
        assert judge is not None  # checked when the claim was made
        try:
            return judge(folder, *self.args)
        except Missing as why:
            return Finding(UNTESTABLE, "—", f"no rows to judge it here: {why}")


def _function(judge: str) -> Callable[..., Finding] | None:
    """``"<module>.<function>"`` of this package's ``MODULES``, or None."""
    module, _, name = judge.partition(".")
    if module not in MODULES:
        return None
    f = getattr(importlib.import_module(f"{__name__}.{module}"), name, None)
    return f if callable(f) else None


def anchor(heading: str) -> str:
    """A Markdown heading's link anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _claim(entry: dict[str, Any]) -> Claim:
    """One entry of ``claims.yaml`` as a ``Claim``; ``ValueError`` naming the claim and the field."""
    names = {f.name for f in fields(Claim)}
    key = entry.get("key", "?")
    unknown = sorted(set(entry) - names)
    if unknown:
        raise ValueError(
            f"claim {key}: field {unknown[0]!r} is unknown; allowed: {', '.join(sorted(names))}"
        )
    missing = sorted(names - set(entry) - {"args"})
    if missing:
        raise ValueError(f"claim {key}: field {missing[0]!r} is missing")
    return Claim(**{**entry, "args": tuple(entry.get("args", ()))})


@cache
def registry() -> tuple[Claim, ...]:
    """Every claim, in the paper's order (``claims.yaml``'s)."""
    claims = tuple(_claim(e) for e in yaml.safe_load(DATA.read_text(encoding="utf-8")))
    keys = [c.key for c in claims]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ValueError(f"claims named twice: {', '.join(sorted(dup))}")
    return claims


def of(report: str) -> list[Claim]:
    """The claims a report judges."""
    return [c for c in registry() if c.report == report]


@dataclass(frozen=True)
class Answer:
    """One line of a page's answer (``templates/answers.md.j2``)."""

    verdict: str
    what: str
    number: str
    anchor: str = ""


LEAD = (
    "The paper's claims this page judges (rules: `paper/verdict.py`; every claim of the paper: "
    "[the scorecard](../README.md)):"
)


TARGETS_LEAD = (
    "No claim of the paper is judged on this page (every claim: [the scorecard](../README.md)); "
    "its own targets, as measured:"
)


def targeted(target: str, verdict: str, heading: str, **c: Any) -> Answer:
    """A page's answer on one of its own targets (under ``TARGETS_LEAD``), linked to ``heading`` and
    worded by ``templates/target_answers.md.j2``: its macros ``<target>_what`` and
    ``<target>_number``, each called with the numbers ``c``."""
    what, number = (words("target_answers", f"{target}_{part}", c=c) for part in ("what", "number"))
    return Answer(verdict, what, number, anchor(heading))


def answers(report: str, folder: Path) -> list[Answer]:
    """A page's first lines: each claim it judges with its verdict, the scorecard's findings."""
    out = []
    for c in of(report):
        f = c.find(folder)
        number = f"ours {f.ours}; the paper {c.paper} — {f.reason}"
        out.append(Answer(f.verdict, f"{c.statement} ({c.section})", number, anchor(c.heading)))
    return out
