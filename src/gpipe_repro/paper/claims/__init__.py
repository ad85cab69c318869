"""Every claim of the paper, as data: where it stands, what it says, which report's rows judge it, by which rule.

A ``Claim`` names its section of the paper (§2-§5, Tables 1-5, Fig. 3), the statement and the paper's
number, the report folder (``reports/<report>/``) and the heading of its page that shows the
evidence, the rows that judge it, and its rule (``paper.verdict``): a function of that report's
files alone, so the same claim gets the same verdict on the report's own page (its first lines,
``answers``) and in the scorecard (``reports/README.md``, ``paper.scorecard``), from any copy of the
report. A report adds its claims in a module of this package listed in ``MODULES``, each module a
tuple ``CLAIMS``; the modules are imported on first use, so an artefact's page code can import this
package and a claim module can import the artefact's row types.

A judge that finds no rows to judge (a quick variant, a failed sweep) raises ``Missing``: the claim
is then *not testable here* with that line as its reason.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..verdict import RULES, UNTESTABLE, Finding

MODULES = ("algorithm", "table1", "throughput", "transfer", "translation")


class Missing(Exception):
    """The report's rows lack what a claim is judged on (one line: what)."""


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
    judge: Callable[[Path], Finding]  # the rule applied to the report folder's files

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"claim {self.key}: rule {self.rule!r} is none of {', '.join(RULES)}")

    @property
    def link(self) -> str:
        """The page's section, relative to ``reports/``."""
        return f"{self.report}/{self.page}#{anchor(self.heading)}"

    def find(self, folder: Path) -> Finding:
        """The verdict from the files in ``folder`` (the report's own, or where it is rendered)."""
        try:
            return self.judge(folder)
        except Missing as why:
            return Finding(UNTESTABLE, "—", f"no rows to judge it here: {why}")


def anchor(heading: str) -> str:
    """A Markdown heading's link anchor as GitHub makes it: lower case, punctuation dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def registry() -> tuple[Claim, ...]:
    """Every claim, in the paper's order (the modules' order, then each module's)."""
    claims = tuple(c for m in MODULES for c in importlib.import_module(f"{__name__}.{m}").CLAIMS)
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
