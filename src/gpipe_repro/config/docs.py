"""The option reference, generated from the schema: ``python -m gpipe_repro.config.docs --out docs``.

Writes ``docs/config.md``: every config group with its options, and every key with its type, default,
what is allowed and its one-line doc — all read from the dataclasses, so the page cannot disagree with
what the validator checks.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

from ..options import allowed_text
from ..typed import type_text
from .schema import RunConfig

__all__ = ["markdown", "main"]


def _default(f: Any) -> str:
    if f.default is not MISSING:
        return repr(f.default) if not isinstance(f.default, str) or f.default else "''"
    if f.default_factory is not MISSING:
        v = f.default_factory()
        return "(section)" if is_dataclass(v) else repr(v)
    return "(chosen option)"


def _table(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    rows = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for f in fields(cls):
        if f.name == "name" and prefix in ("model.", "data.", "optim."):
            continue
        v = f.default_factory() if f.default_factory is not MISSING else None
        if is_dataclass(v) or f.name in ("model", "data", "optim"):
            continue
        rows.append(
            f"| `{prefix}{f.name}` | {type_text(hints[f.name])} | `{_default(f)}` | "
            f"{allowed_text(f) or ''} | {f.metadata.get('description', '')} |"
        )
    return rows


def markdown() -> str:
    from .store import _groups

    groups = _groups()
    lines = [
        "# Options",
        "",
        "Generated from the config schema by `python -m gpipe_repro.config.docs --out docs`. Every key is "
        "set on the command line (`gpipe-run pipeline.K=2 train.steps=20`); a group is chosen with "
        "`group=option` (`model=amoebanet_d`). The root config (`conf/config.yaml`) chooses "
        "`model=mlp data=mnist pipeline=gpipe optim=rmsprop logger=wandb`.",
        "",
    ]
    lines += ["## Run", "", *_table(RunConfig, ""), ""]
    for section, cls in [
        ("pipeline", "PipelineConfig"),
        ("train", "TrainConfig"),
        ("logger", "LoggerConfig"),
        ("sweep", "SweepConfig"),
        ("sim", "SimConfig"),
        ("hardware", "HardwareConfig"),
        ("plan", "AutoPlanConfig"),
    ]:
        sub = typing.get_type_hints(RunConfig)[section]
        lines += [
            f"## {section}",
            "",
            " ".join((sub.__doc__ or "").split()),
            "",
            *_table(sub, f"{section}."),
            "",
        ]
        if section in groups:
            lines += [f"Options: {', '.join(f'`{section}={n}`' for n in groups[section])}.", ""]
        elif section == "hardware":
            names = sorted(
                p.stem
                for p in (Path(__file__).resolve().parents[3] / "conf" / "hardware").glob("*.yaml")
            )
            lines += [
                f"Options (conf/hardware/*.yaml): {', '.join(f'`hardware={n}`' for n in names)}.",
                "",
            ]
        assert sub.__name__ == cls
    for group in ("model", "data", "optim"):
        lines += [f"## {group}", ""]
        for name, node in groups[group].items():
            doc = " ".join((type(node).__doc__ or "").split())
            lines += [f"### `{group}={name}`", "", doc, "", *_table(type(node), f"{group}."), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs", type=Path)
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.md").write_text(markdown())
    print(out / "config.md")


if __name__ == "__main__":
    main()
