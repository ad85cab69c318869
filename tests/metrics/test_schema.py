"""The published JSON Schema of ``metrics.json`` as its readers see it: the schema the types generate
now has the structure of the committed ``docs/metrics.schema.json``.

Compared exactly: every keyword that decides whether a document is valid — each object's properties,
``required`` (as a set) and ``additionalProperties``; each value's ``type``, ``items``, ``anyOf`` (as
a set of branches), ``$ref`` and ``enum``; the ``$defs`` by name. Descriptions are compared as text
with runs of whitespace collapsed to one space (a docstring's indentation is no part of its meaning).
Annotations that change no document's validity (``title``, ``default``) are not compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpipe_repro.metrics.schema import json_schema

ROOT = Path(__file__).resolve().parents[2]
ANNOTATIONS = {"title", "default"}


def reader_view(node: Any) -> Any:
    """``node`` with what a reader relies on, in one canonical form."""
    if isinstance(node, list):
        return [reader_view(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ANNOTATIONS:
            continue
        if key in ("properties", "$defs"):  # names, not keywords: keep every one
            out[key] = {name: reader_view(s) for name, s in value.items()}
        elif key == "description":
            out[key] = " ".join(value.split())
        elif key == "required" or (key == "type" and isinstance(value, list)):
            out[key] = sorted(value)
        elif key == "anyOf":
            out[key] = sorted((reader_view(s) for s in value), key=json.dumps)
        else:
            out[key] = reader_view(value)
    return out


def committed() -> dict[str, Any]:
    return json.loads((ROOT / "docs" / "metrics.schema.json").read_text())


def test_the_generated_schema_has_the_committed_structure():
    assert reader_view(json_schema()) == reader_view(committed())


def test_the_view_sees_a_change_a_reader_would_notice():
    base = committed()
    assert reader_view(base) == reader_view(json.loads(json.dumps(base)))
    status = base["properties"]["status"]
    for changed in [
        {**status, "enum": status["enum"][:-1]},  # a status dropped
        {**status, "type": "integer"},
        {**status, "description": status["description"] + " (renamed)"},
    ]:
        other = {**base, "properties": {**base["properties"], "status": changed}}
        assert reader_view(other) != reader_view(base)
    assert reader_view({**base, "required": base["required"][1:]}) != reader_view(base)
    # what the view leaves alone: order, indentation, annotations
    loose = {
        **base,
        "required": base["required"][::-1],
        "description": "  " + base["description"].replace(" ", "\n    "),
        "title": "another title",
    }
    assert reader_view(loose) == reader_view(base)
