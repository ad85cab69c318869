"""One typed serialisation of the project's plain dataclasses, by pydantic 2's ``TypeAdapter``.

``metrics.json`` (``metrics.contract``), a report's CSV rows (``typed_csv``) and the published JSON
Schema (``metrics.schema``) go through this one mechanism: values are read back into the declared
types — nested dataclasses found from the type hints, no list of classes — and dumped to JSON, and
the JSON Schema is generated from the same types. A field's doc and allowed values come from its
``opt`` metadata (``options.opt``), which uses pydantic's own keys (``description``,
``json_schema_extra``), so pydantic reads them straight from the dataclass field.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

__all__ = ["adapter", "load", "dump", "json_schema", "type_text"]

T = TypeVar("T")
DIALECT = "https://json-schema.org/draft/2020-12/schema"


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def adapter(cls: type[T]) -> TypeAdapter[T]:
    """pydantic's validator, serialiser and schema of ``cls``, built once per type."""
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def load(cls: type[T], data: Any) -> T:
    """``data`` (parsed JSON, or text cells) as a ``cls``; ValueError in one line naming each key
    that breaks the type: an unknown key, a missing one, a value of the wrong type."""
    try:
        return adapter(cls).validate_python(data)
    except ValidationError as err:
        raise ValueError(_one_line(err, cls.__name__)) from None


def _one_line(err: ValidationError, name: str) -> str:
    unknown: dict[str, list[str]] = {}
    wrong = []
    for e in err.errors():
        *where, key = [name, *map(str, e["loc"])]
        if e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            unknown.setdefault(".".join(where), []).append(key)
        else:
            wrong.append(f"{'.'.join([*where, key])}: {e['msg'].lower()} (got {e['input']!r})")
    return "; ".join(
        [f"unknown {w} keys: {', '.join(sorted(keys))}" for w, keys in unknown.items()] + wrong
    )


def dump(obj: Any) -> dict[str, Any]:
    """``obj`` as JSON values: nested dataclasses as objects, a non-finite float as null (JSON has
    none), and what has no JSON form (a path, a numpy number) as its text."""
    text = adapter(type(obj)).dump_json(obj, fallback=str)
    out: dict[str, Any] = json.loads(text)
    return out


class _Contract(GenerateJsonSchema):
    """pydantic's schema in the contract's form: every key required (the writer writes them all),
    no titles or defaults (the descriptions say it), a float as any number, a dict as any object,
    keys in the order the types declare them (not sorted)."""

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        return value

    def field_is_required(self, field: Any, total: bool) -> bool:
        return True

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return {"type": ["number", "integer"]}

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        return {"type": "object"}

    def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
        out = super().dataclass_schema(schema)
        out.pop("title", None)
        return out


def json_schema(cls: type, title: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``cls``'s documents."""
    return {
        "$schema": DIALECT,
        "title": title,
        **adapter(cls).json_schema(schema_generator=_Contract),
    }


def type_text(t: Any) -> str:
    """How a field's type reads on a generated page: ``int \\| null``, ``list[StageMetrics]``."""
    args = typing.get_args(t)
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(a) for a in args)
    if typing.get_origin(t) is list:
        return f"list[{type_text(args[0])}]"
    if typing.get_origin(t) is dict:
        return "object"
    return "null" if t is type(None) else getattr(t, "__name__", str(t))
