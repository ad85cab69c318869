"""``opt``: one option of a structured config — its default, one-line doc and what is allowed, stated once.

Every config dataclass of the harness (``config.schema``, the models', datasets' and optimisers' own
configs) declares its fields with ``opt``. Hydra's ConfigStore gives them their types and defaults; the
validator (``config.validate``) reads ``choices``/``min``/``max`` from the same metadata; the option
reference (``docs/config.md``) is generated from it. Allowed values come from the constants of the code
that uses them (e.g. ``engine.SCHEDULES``), never from a second list.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import MISSING, Field, field, fields, is_dataclass
from typing import Any

from .errors import UserError

__all__ = ["opt", "allowed_text", "check_fields"]


def opt(
    default: Any = MISSING,
    doc: str = "",
    *,
    choices: Sequence[str] | None = None,
    min: float | None = None,  # noqa: A002 - reads as the bound it is
    max: float | None = None,  # noqa: A002
    allowed: str | None = None,
) -> Any:
    """A dataclass field with its doc and constraints. ``allowed`` describes a constraint that a
    cross-field check enforces (shown in messages and docs). The doc and the choices are also kept
    under pydantic's own keys, so a JSON Schema generated from the dataclass (``typed``) has them."""
    meta = {
        "description": doc,
        "json_schema_extra": {"enum": list(choices)} if choices is not None else None,
        "choices": tuple(choices) if choices is not None else None,
        "min": min,
        "max": max,
        "allowed": allowed,
    }
    if isinstance(default, (list, dict)) or is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def allowed_text(f: Field[Any]) -> str | None:
    """What ``f`` allows, in words: "never, except_last, always", "an integer >= 1", ..."""
    m = f.metadata
    if m.get("choices"):
        return ", ".join(str(c) for c in m["choices"])
    if m.get("allowed"):
        return str(m["allowed"])
    lo, hi = m.get("min"), m.get("max")
    kind = "an integer" if f.type in ("int", int, "int | None") else "a number"
    if lo is not None and hi is not None:
        return f"{kind} in {_num(lo)}..{_num(hi)}"
    if lo is not None:
        return f"{kind} >= {_num(lo)}"
    if hi is not None:
        return f"{kind} <= {_num(hi)}"
    return None


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def check_fields(obj: Any, path: str) -> None:
    """Each field of the dataclass ``obj`` (recursively) against its ``opt`` metadata."""
    for f in fields(obj):
        v = getattr(obj, f.name)
        key = f"{path}.{f.name}" if path else f.name
        if is_dataclass(v):
            check_fields(v, key)
            continue
        m = f.metadata
        if v is None or isinstance(v, bool):
            continue
        if m.get("choices") and v not in m["choices"]:
            raise UserError(f"{key}={v!r} is not allowed; allowed: {allowed_text(f)}")
        if isinstance(v, (int, float)) and (
            (m.get("min") is not None and v < m["min"])
            or (m.get("max") is not None and v > m["max"])
        ):
            raise UserError(f"{key}={v} is invalid; allowed: {allowed_text(f)}")
