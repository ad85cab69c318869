"""Compose a run's config from the command line, the same way for every entry point.

``gpipe-run`` (the Hydra app) and the torchrun/SLURM entry (``gpipe_repro.multinode``) both start here:
``preflight`` checks the command line before anything runs (one line, exit 2); ``compose`` builds a
validated ``RunConfig`` with Hydra's compose API (the torchrun entry, tests, scripts); ``to_spec`` turns
the config Hydra hands a job into the same validated object.

Command-line mistakes caught here: an unknown group option (``model=foo``), an unknown key, with the
nearest real one suggested (``pipelin.K=2``, ``+pipeline.k=2`` — with a typed schema there is nothing a
``+`` could legitimately add), a value of the wrong type (``pipeline.K=abc``), bad override syntax, an
unknown Hydra plugin option (``hydra/launcher=nonexistent``). Every value of a sweep is checked.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..errors import UserError
from ..options import allowed_text
from .schema import RunConfig
from .store import GROUPS, group_options, register
from .validate import auto_conflict, validate

__all__ = ["CONF_DIR", "preflight", "compose", "to_spec", "config_keys", "sweep_world_size"]

CONF_DIR = Path(os.environ.get("GPIPE_CONF", Path(__file__).resolve().parents[3] / "conf"))


@contextmanager
def _hydra() -> Iterator[None]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().clear()


def _compose(overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose

    return hydra_compose("config", overrides=overrides)


def config_keys(cfg: Any, prefix: str = "") -> list[str]:
    """Every leaf key of a composed config, dotted."""
    out: list[str] = []
    for k, v in cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else []:
        key = f"{prefix}{k!s}"
        out += config_keys(v, key + ".") if isinstance(v, DictConfig) else [key]
    return out


def _field(cfg: DictConfig, key: str) -> Any:
    """The dataclass field behind ``key`` in a composed config, or None."""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    t = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    if t is None or not is_dataclass(t):
        return None
    return next((f for f in fields(t) if f.name == name), None)


_KIND = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean (true, false)",
    "str": "a string",
}


def _type_error(cfg: DictConfig, key: str, value: str) -> str:
    f = _field(cfg, key)
    tname = str(f.type) if f is not None else ""
    base = tname.replace(" | None", "").replace("Optional[", "").rstrip("]")
    kind = _KIND.get(base, "a list" if base.startswith("list") else f"of type {base}")
    allowed = allowed_text(f) if f is not None else None
    return f"{key}={value!r} is not {kind}" + (f"; allowed: {allowed}" if allowed else "")


def _unknown_key(cfg: DictConfig, key: str) -> str:
    keys = config_keys(cfg)
    section, _, sub = key.partition(".")
    if section in ("model", "data", "optim") and sub:
        # A key of the chosen option's own config: suggest among its keys, or name the options that have it.
        own = [k.split(".", 1)[1] for k in keys if k.startswith(section + ".")]
        choice = OmegaConf.select(cfg, f"{section}.name")
        near = difflib.get_close_matches(sub.lower(), [k.lower() for k in own], n=1, cutoff=0.75)
        others = [
            name
            for name, node in _group_nodes(section).items()
            if any(f.name == sub for f in fields(type(node)))
        ]
        hint = (
            f"did you mean {section}.{own[[k.lower() for k in own].index(near[0])]}?"
            if near
            else f"{section}={' or '.join(others)} has it"
            if others
            else f"its keys: {', '.join(k for k in own if k != 'name')}"
        )
        return f"{key} is not a key of {section}={choice}; {hint}"
    lowered = {k.lower(): k for k in keys}
    near = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return f"{key} is not a config key" + (f"; did you mean {lowered[near[0]]}?" if near else "")


def _group_nodes(group: str) -> dict[str, Any]:
    from .store import _groups

    return _groups().get(group, {})


def _exists(cfg: DictConfig, key: str) -> bool:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return True


def preflight(argv: list[str]) -> str | None:
    """One line describing what is wrong with the command line, or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as err:
        return str(err).strip().splitlines()[0]
    variants: list[list[str]] = []  # every sweep value of every override, with the others' first
    firsts: list[str] = []
    for ov in parsed:
        key = ov.key_or_group
        values = (
            [str(v) for v in ov.sweep_string_iterator()]
            if ov.is_sweep_override()
            else [ov.get_value_element_as_str()]
        )
        if key in GROUPS and not ov.is_delete():
            allowed = group_options(key, CONF_DIR)
            for v in values:
                if v not in allowed and v != "null":
                    return f"{key}={v} is not a {key} config; allowed: {', '.join(allowed)}"
        line = f"{ov.get_key_element()}={values[0]}" if values else str(ov.input_line)
        variants.append([f"{ov.get_key_element()}={v}" for v in values[1:]])
        firsts.append(line)
    conflict = auto_conflict(firsts)
    if conflict:
        return conflict
    jobs = [firsts] + [
        firsts[:i] + [alt] + firsts[i + 1 :] for i, alts in enumerate(variants) for alt in alts
    ]
    with _hydra():
        for job in jobs:
            problem = _check_job(job)
            if problem:
                return problem
    return None


def _check_job(overrides: list[str]) -> str | None:
    from hydra.errors import MissingConfigException

    groups = [
        o for o in overrides if o.split("=")[0].lstrip("+~") in GROUPS or "/" in o.split("=")[0]
    ]
    try:
        base = _compose([o for o in groups if not o.startswith("hydra/")])
    except Exception as err:  # noqa: BLE001 - Hydra's composition errors, reported in one line
        return _one_line(err)
    for o in overrides:
        key, _, value = o.partition("=")
        bare = key.lstrip("+~")
        if bare in GROUPS:
            continue
        if "/" in bare:  # a Hydra plugin group, e.g. hydra/launcher=submitit_local
            if bare.startswith("hydra/"):
                msg = _plugin_option(bare, value)
                if msg:
                    return msg
            continue
        if bare in ("hydra.run.dir", "hydra.sweep.dir"):
            msg = _folder_problem(bare, value)
            if msg:
                return msg
            continue
        if bare.startswith("hydra."):
            continue
        if not _exists(base, bare):
            return _unknown_key(base, bare)
    try:
        _compose(
            [
                o
                for o in overrides
                if not o.startswith("hydra/") and not o.split("=")[0].startswith("hydra.")
            ]
        )
    except MissingConfigException as err:
        return _one_line(err)
    except Exception as err:  # noqa: BLE001
        cause = err.__cause__ or err
        m = re.search(r"full_key: (\S+)", str(cause))
        if m:
            key = m.group(1)
            value = next(
                (
                    o.partition("=")[2]
                    for o in reversed(overrides)
                    if o.split("=")[0].lstrip("+") == key
                ),
                "?",
            )
            return _type_error(base, key, value)
        return _one_line(err)
    return None


def _folder_problem(key: str, value: str) -> str | None:
    """Why the run's folder could not be made, or None (checked before Hydra tries and fails loudly)."""
    path = Path(value).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{key}={value}: {probe} is a file, not a folder"
    if not os.access(probe, os.W_OK):
        return f"{key}={value}: {probe} is not writable"
    return None


def _plugin_option(group: str, value: str) -> str | None:
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    options = sorted(loader.get_group_options(group))
    if value not in options:
        return f"{group}={value} is not a {group} config; allowed: {', '.join(options) or 'none installed'}"
    return None


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text.split(". ")[0] if len(text) > 200 else text


def to_spec(
    cfg: DictConfig, cuda_available: bool | None = None, sweep_world: int | None = None
) -> RunConfig:
    """The validated run spec from the config Hydra composed (raises UserError); ``sweep_world``:
    the largest K*replicas of its sweep (``sweep_world_size``)."""
    plain = OmegaConf.to_object(cfg)
    if not isinstance(plain, RunConfig):  # pragma: no cover - the root schema guarantees it
        raise UserError(f"the composed config is a {type(plain).__name__}, not a RunConfig")
    return validate(plain, cuda_available, sweep_world)


def sweep_world_size(overrides: list[str], params: dict[str, str], K: int, replicas: int) -> int:
    """The largest K*replicas among a sweep's jobs: from its command line's and its experiment's
    (``hydra.sweeper.params``) values of ``pipeline.K`` and ``pipeline.replicas``; ``K`` and
    ``replicas`` where neither sweeps them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [f"{k}={v}" for k, v in params.items()] + [
        a for a in overrides if not a.startswith("-") and "=" in a
    ]
    values = {"pipeline.K": [K], "pipeline.replicas": [replicas]}
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception:  # noqa: BLE001 - preflight has reported a malformed line already
        return K * replicas
    for ov in parsed:
        key = ov.key_or_group
        if key in values:
            raw = (
                list(ov.sweep_string_iterator())
                if ov.is_sweep_override()
                else [ov.get_value_element_as_str()]
            )
            ints = [int(v) for v in raw if str(v).isdigit()]
            values[key] = ints or values[key]
    return max(values["pipeline.K"]) * max(values["pipeline.replicas"])


def compose(
    overrides: list[str] | tuple[str, ...] = (),
    cuda_available: bool | None = None,
    check: bool = True,
) -> RunConfig:
    """Compose ``conf/config.yaml`` with ``overrides`` and validate it (raises UserError)."""
    ovs = list(overrides)
    if check:
        err = preflight(ovs)
        if err:
            raise UserError(err)
    with _hydra():
        cfg = _compose(ovs)
    return to_spec(cfg, cuda_available)
