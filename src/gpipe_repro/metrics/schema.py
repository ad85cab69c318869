"""JSON Schema and a markdown page generated from the ``metrics.json`` types (``metrics.contract``).

    python -m gpipe_repro.metrics.schema --out docs     # writes metrics.schema.json and metrics.md

The schema is for consumers in other languages, and the tests check real ``metrics.json`` files
against the very schema that is published, with ``jsonschema`` (draft 2020-12).
"""

from __future__ import annotations

import argparse
import json
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from .contract import RunMetrics

__all__ = ["json_schema", "markdown", "write_docs"]

_PRIM = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _type_schema(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(t)
    if t is type(None):
        return {"type": "null"}
    if t in _PRIM:
        return {"type": _PRIM[t]} if t is not float else {"type": ["number", "integer"]}
    if t is Any:
        return {}
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return {"anyOf": [_type_schema(a, defs) for a in typing.get_args(t)]}
    if origin is list:
        (item,) = typing.get_args(t)
        return {"type": "array", "items": _type_schema(item, defs)}
    if origin is dict:
        return {"type": "object"}
    if is_dataclass(t):
        name = getattr(t, "__name__", str(t))
        if name not in defs:
            defs[name] = {}
            defs[name] = _object(t, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON schema for {t!r}")


def _object(cls: Any, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    for f in fields(cls):
        s = _type_schema(hints[f.name], defs)
        if f.metadata.get("choices"):
            s = {**s, "enum": list(f.metadata["choices"])}
        if f.metadata.get("doc"):
            s = {**s, "description": f.metadata["doc"]}
        props[f.name] = s
    required = [f.name for f in fields(cls)]
    return {
        "type": "object",
        "description": (cls.__doc__ or "").strip(),
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def json_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    root = _object(RunMetrics, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpipe-repro metrics.json",
        **root,
        "$defs": defs,
    }


def _type_name(t: Any) -> str:
    origin = typing.get_origin(t)
    if t is type(None):
        return "null"
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_name(a) for a in typing.get_args(t))
    if origin is list:
        return f"list[{_type_name(typing.get_args(t)[0])}]"
    if origin is dict:
        return "object"
    return getattr(t, "__name__", str(t))


def markdown() -> str:
    lines = [
        "# `metrics.json`",
        "",
        "Generated from `src/gpipe_repro/metrics/contract.py` by "
        "`python -m gpipe_repro.metrics.schema --out docs` (JSON Schema: `metrics.schema.json`). "
        "Every run writes one, also when it fails or is interrupted; `trace.json` (Chrome trace) and "
        "`timeline.png` lie beside it.",
        "",
    ]
    seen: list[Any] = []

    def section(cls: Any) -> None:
        seen.append(cls)
        hints = typing.get_type_hints(cls)
        lines.extend(
            [
                f"## {cls.__name__}",
                "",
                (cls.__doc__ or "").strip(),
                "",
                "| key | type | meaning |",
                "|---|---|---|",
            ]
        )
        nested = []
        for f in fields(cls):
            doc = f.metadata.get("doc", "")
            if f.metadata.get("choices"):
                doc += f" (one of: {', '.join(f.metadata['choices'])})"
            lines.append(f"| `{f.name}` | {_type_name(hints[f.name])} | {doc} |")
            for a in [hints[f.name], *typing.get_args(hints[f.name])]:
                for b in [a, *typing.get_args(a)]:
                    if is_dataclass(b) and b not in seen and b not in nested:
                        nested.append(b)
        lines.append("")
        for b in nested:
            if b not in seen:
                section(b)

    section(RunMetrics)
    return "\n".join(lines)


def write_docs(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "metrics.schema.json", out / "metrics.md"]
    paths[0].write_text(json.dumps(json_schema(), indent=2) + "\n")
    paths[1].write_text(markdown())
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs", type=Path)
    for p in write_docs(ap.parse_args().out):
        print(p)


if __name__ == "__main__":
    main()
