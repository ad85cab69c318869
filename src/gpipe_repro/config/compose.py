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
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..errors import UserError
from ..options import allowed_text
from .schema import RESUME_ALLOW, RunConfig
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


# Hydra's own flags that take the next argument as their value (``gpipe-run --cfg job``).
VALUE_FLAGS = frozenset(
    "-cn --config-name -cp --config-path -cd --config-dir -c --cfg -p --package "
    "--experimental-rerun -sc --shell-completion".split()
)
# The options that name a folder the run writes: an empty or unusable one is refused here.
PATH_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "train.save_dir")


def _arguments(argv: list[str]) -> tuple[list[str], str | None]:
    """The overrides of a command line (its flags and their values left out), or the one line on
    an argument that is neither — most often a value the shell split at a space."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip or a.startswith("-"):
            skip = not skip and a in VALUE_FLAGS
            continue
        if "=" not in a and not a.startswith("~"):
            if out:
                whole = shlex.quote(f"{out[-1]} {a}")
                return out, (
                    f"{a!r} is not an override (key=value); if it is the rest of {out[-1]} (a "
                    f"value with a space), quote the whole: {whole}"
                )
            return out, f"{a!r} is not an override; allowed: key=value"
        out.append(a)
    return out, None


def _quoted(key: str, value: str) -> str:
    """``key="value"`` that Hydra reads back as ``value``, ready to paste into a shell (quotes in
    the value escaped; a backslash needs escaping only before a quote or at the end)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for q in "\"'":
        inner = re.sub(
            r"(\\*)(" + q + r"|$)",
            lambda m: m.group(1) * 2 + "\\" * bool(m.group(2)) + m.group(2),
            value,
        )
        line = f"{key}={q}{inner}{q}"
        try:
            if OverridesParser.create().parse_override(line).value() == value:
                return shlex.quote(line)
        except Exception:  # noqa: BLE001 - not this way: try the other quote
            continue
    return shlex.quote(f'{key}="{value}"')


def _syntax(arg: str, multirun: bool) -> str | None:
    """One line on an override Hydra cannot read as meant — naming the key, the value and what to
    do (most often: quote it) — or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    key, _, value = arg.partition("=")
    bare = key.lstrip("+~")
    try:
        ov = OverridesParser.create().parse_override(arg)
    except HydraException as err:
        said = " ".join(str(err).split("See https")[0].split())
        if value.lstrip().startswith(("[", "{")):  # a list or a dict: its syntax, not quotes
            return f"{bare}={value}: {said}; a list is written [a,b], a dict {{k:v}}"
        bad = next((c for c in value if not c.isascii() or c in "()[]{}'\"=<>!#&;^~`"), None)
        why = f"Hydra cannot read {bad!r} in a value unless it is quoted" if bad else said
        return f"{bare}={value}: {why}; quote the value: {_quoted(bare, value)}"
    if bare in PATH_KEYS:
        if ov.is_sweep_override():
            return (
                f"{bare}={value}: the comma makes a sweep of folders; a folder whose name has a "
                f"comma needs quotes: {_quoted(bare, value)}"
            )
        if not value.strip() and not ov.is_delete():
            return (
                f"{bare} is empty: the run would write into the current folder; give a folder, "
                f"e.g. {bare}=outputs/my-run"
                + (" (or null: <the run's folder>/saves)" if bare == "train.save_dir" else "")
            )
    elif ov.is_sweep_override() and not multirun:
        return (
            f"{bare}={value} is a sweep of {len(list(ov.sweep_string_iterator()))} values: add -m "
            f"to run each (gpipe-run -m ...); a value with a comma in it needs quotes"
        )
    return None


def preflight(argv: list[str]) -> str | None:
    """One line describing what is wrong with the command line, or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args, problem = _arguments(argv)
    if problem:
        return problem
    multirun = any(a in ("-m", "--multirun") for a in argv)
    for a in args:
        problem = _syntax(a, multirun)
        if problem:
            return problem
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
    conflict = auto_conflict(firsts) or _balance_conflict(firsts)
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


def _balance_conflict(overrides: list[str]) -> str | None:
    """One line when a command line gives both the cells (``pipeline.balance``) and the cost that
    would choose them (``pipeline.balance_by``): only one of them can happen. (A ``balance_by`` that
    only a config file or the default sets is recorded as not used: ``metrics.json``'s
    ``pipeline.balance_by`` is null when ``pipeline.balance`` gave the cells.)"""
    given = {o.partition("=")[0].lstrip("+"): o for o in overrides}
    balance, by = given.get("pipeline.balance"), given.get("pipeline.balance_by")
    if balance is None or by is None or balance.partition("=")[2] in ("null", ""):
        return None
    return (
        f"{balance} and {by} exclude each other: balance gives the cells, balance_by chooses "
        "them; allowed: one of them"
    )


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
    """Why the run's folder could not be made, or None (checked before Hydra tries and fails loudly;
    what only trying tells — a read-only file system, /sys — gpipe-run's claim of the folder says,
    in one line too: ``cli.ClaimCallback``)."""
    if "${" in value:  # an interpolation: resolved, and checked, when the folder is claimed
        return None
    path = Path(value).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{key}={value}: {probe} is a file, not a folder; choose a folder ({key}=...)"
    if not os.access(probe, os.W_OK):
        return f"{key}={value}: {probe} is not writable; choose a folder you can write ({key}=...)"
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
    bad = [v for v in plain.train.resume_allow if v not in RESUME_ALLOW]
    if bad:
        raise UserError(
            f"train.resume_allow={list(plain.train.resume_allow)} has {bad[0]!r}; allowed: a "
            f"list of {', '.join(RESUME_ALLOW)}"
        )
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
    flags = [o for o in ovs if o.startswith("-")]
    if flags:
        raise UserError(f"{flags[0]!r} is not an override; allowed: key=value overrides")
    if check:
        err = preflight(ovs)
        if err:
            raise UserError(err)
    with _hydra():
        cfg = _compose(ovs)
    return to_spec(cfg, cuda_available)
