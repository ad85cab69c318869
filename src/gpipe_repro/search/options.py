"""``gpipe-plan``'s own options (``plan.*``) and how its command line splits from a run's.

Every other override (``model=``, ``data=``, ``hardware=``, ``train.precision=`` ...) composes and
validates a ``RunConfig`` exactly as ``gpipe-run`` does (``config.compose``); ``plan.*`` overrides are
typed by ``PlanConfig`` and checked against its ``opt`` metadata (one line each).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..config.schema import PlanSearchConfig
from ..errors import UserError
from ..options import check_fields, opt

__all__ = ["PlanConfig", "split_args", "plan_config", "usage"]

PREFIX = "plan."


@dataclass
class PlanConfig(PlanSearchConfig):
    """What ``gpipe-plan`` searches under: the devices, their memory, the mini-batch (the search's
    options are ``plan=auto``'s, ``config.schema.PlanSearchConfig``; a published device has no
    count, so ``plan.devices`` defaults to one)."""

    devices: int | None = opt(1, "accelerators available (K * replicas <= devices)", min=1)
    batch_size: str | None = opt(
        None,
        "the global mini-batch: an integer, fit (the largest that fits), or null = train.batch_size",
        allowed="null, fit or an integer >= 1",
    )
    top: int = opt(
        10, "rows of the ranked table (the bound prunes against the last of them)", min=2
    )
    out: str = opt("plan", "folder for plan.csv and plan.md")


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(``plan.*`` overrides, the run's overrides)."""
    mine = [a for a in argv if a.lstrip("+").startswith(PREFIX)]
    return mine, [a for a in argv if a not in mine]


def plan_config(args: list[str]) -> PlanConfig:
    """``PlanConfig`` from ``plan.key=value`` overrides (UserError: one line)."""
    base = OmegaConf.structured(PlanConfig)
    for a in args:
        key, eq, value = a.lstrip("+").removeprefix(PREFIX).partition("=")
        if not eq:
            raise UserError(f"{a!r} is not an override; allowed: plan.KEY=VALUE")
        if key not in base:
            keys = ", ".join(f"plan.{k}" for k in base)
            raise UserError(f"plan.{key} is not a config key; allowed: {keys}")
        try:
            base.merge_with(OmegaConf.from_dotlist([f"{key}={value}"]))
        except OmegaConfBaseException as err:
            raise UserError(f"plan.{key}={value!r}: {str(err).splitlines()[0]}") from None
    out = OmegaConf.to_object(base)
    assert isinstance(out, PlanConfig)
    check_fields(out, "plan")
    b = out.batch_size
    if b is not None and b != "fit" and not (b.isdigit() and int(b) >= 1):
        raise UserError(f"plan.batch_size={b!r} is invalid; allowed: null, fit or an integer >= 1")
    return out


def usage(about: str) -> str:
    """``gpipe-plan --help``: ``about`` (the entry point's docstring) and every ``plan.*`` option
    with its default and doc, from ``PlanConfig`` (the run's options are gpipe-run's)."""
    lines = [about.strip(), "", "gpipe-plan's own options (plan.KEY=VALUE):"]
    for f in fields(PlanConfig):
        lines.append(f"  plan.{f.name}={f.default}  {f.metadata.get('doc', '')}")
    lines += [
        "",
        "Every other key=value is a run option, as gpipe-run takes it: see docs/config.md.",
    ]
    return "\n".join(lines)
