"""A page from its template: ``templates/<name>.md.j2`` filled from an artefact's summary by Jinja2.

A template holds a page's prose and reads every number from the summary it is given (``s``) and the
page's first lines (``head``: the title, the page's answer — the verdicts of what it judges,
``templates/answers.md.j2`` — and the provenance); tables come from ``table`` and numbers from the formatters of
``markdown``, both available in the template under the same names. Blocks are trimmed
(``trim_blocks``, ``lstrip_blocks``) so a ``{% if %}`` line leaves no line of its own in the page.
A sentence quoted apart from a page (a claim's finding, a line of a summary) is a macro of a template
(``words``), filled the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import jinja2

from . import markdown
from .provenance import Provenance

FORMATS = ("table", "num", "pct", "ms", "us", "mib", "gib", "ratio", "yes")


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpipe_repro.paper", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    for name in FORMATS:
        env.filters[name] = env.globals[name] = getattr(markdown, name)
    return env


def answer(answers: Sequence[Any], lead: str) -> str:
    """A page's answer: ``lead`` and one line per verdict (``claims.Answer``); ``lead`` alone for
    none (it says where the verdicts are), nothing without either."""
    if not answers:
        return lead
    return _environment().get_template("answers.md.j2").render(answers=answers, lead=lead)


def render(
    name: str,
    prov: Provenance,
    title: str,
    answers: Sequence[Any] = (),
    lead: str = "",
    **context: Any,
) -> str:
    """``templates/<name>.md.j2`` with ``head`` (``title``, the page's ``answers`` under ``lead``,
    the provenance) and ``context`` (an artefact's summary)."""
    head = "\n".join(prov.page(title, answer(answers, lead)))
    return _environment().get_template(f"{name}.md.j2").render(head=head, **context)


def words(name: str, macro: str, /, **context: Any) -> str:
    """Macro ``macro`` of ``templates/<name>.md.j2`` called with ``context``: a sentence worded in a
    template, where Python would assemble it piece by piece."""
    template = _environment().get_template(f"{name}.md.j2")
    return str(getattr(template.module, macro)(**context))
