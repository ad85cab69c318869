"""Every claim of the paper, as data: where it stands, what it says, which report's rows judge it, by which rule.

The claims are listed in ``claims.yaml`` (its header names the fields), in the paper's order. A
``Claim`` names its section of the paper (§2-§5, Tables 1-5, Fig. 3), the statement and the paper's
number, the report folder (``reports/<report>/``) and the heading of its page that shows the
evidence, the rows that judge it, and its rule (``paper.verdict``), applied by its judge: a
function of one of the modules in ``MODULES`` that reads that report's files alone, so the same
claim gets the same verdict on the report's own page (its first lines, ``answers``) and in the
scorecard (``reports/README.md``, ``paper.scorecard``), from any copy of the report. The modules
are imported on first use, so an artefact's page code can import this package and a judge's module
can import the artefact's row types.

A judge that finds no rows to judge (a quick variant, a failed sweep) raises ``Missing``: the claim
is then *not testable here* with that line as its reason.
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

from ..rows import Row, read_csv
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


@dataclass(frozen=True)
class Claim:
    key: str  # unique, short: "t2-contrast"
    section: str  # where in the paper: "§3, Table 2"
    statement: str  # the paper's claim, in words
    paper: str  # the paper's number(s)
    report: str  # reports/<report>/
    page: str  # the page file in it
    heading: str  # the heading of the page's section that shows the evidence
    rows: str  # which rows judge it
    rule: str  # a key of ``verdict.RULES``
    judge: str  # "<module>.<function>" of this package: function(folder, *args) -> Finding
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
    """A Markdown heading's link anchor as GitHub makes it: lower case, punctuation dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _claim(entry: dict[str, Any]) -> Claim:
    """One entry of ``claims.yaml`` as a ``Claim``; a field unknown or missing, a rule or a judge
    that does not exist: ``ValueError`` in one line naming the claim and the field."""
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
    """One line of a page's answer (``templates/answers.md.j2``): a verdict, what it is about, the
    number behind it, the page's section that shows it."""

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


def answers(report: str, folder: Path) -> list[Answer]:
    """A page's first lines: each claim it judges, its verdict and the number behind it, from the
    files in ``folder`` — the same findings as the scorecard's."""
    out = []
    for c in of(report):
        f = c.find(folder)
        number = f"ours {f.ours}; the paper {c.paper} — {f.reason}"
        out.append(Answer(f.verdict, f"{c.statement} ({c.section})", number, anchor(c.heading)))
    return out
