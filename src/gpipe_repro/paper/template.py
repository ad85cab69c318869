"""A page from its template: ``templates/<name>.md.j2`` filled from an artefact's summary by Jinja2.

A template holds a page's prose and reads every number from the summary it is given (``s``) and the
provenance's first lines (``head``); tables come from ``table`` and numbers from the formatters of
``markdown``, both available in the template under the same names. Blocks are trimmed
(``trim_blocks``, ``lstrip_blocks``) so a ``{% if %}`` line leaves no line of its own in the page.
"""

from __future__ import annotations

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


def render(name: str, prov: Provenance, title: str, **context: Any) -> str:
    """``templates/<name>.md.j2`` with ``head`` (the provenance's lines under ``title``) and
    ``context`` (an artefact's summary)."""
    head = "\n".join(prov.page(title))
    return _environment().get_template(f"{name}.md.j2").render(head=head, **context)
