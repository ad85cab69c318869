"""``gpipe-run``: the Hydra app. Compose the config, validate it, run it, write its outputs.

    gpipe-run model=mlp data=mnist pipeline.K=2 pipeline.M=4
    gpipe-run -m pipeline.K=1,2 pipeline.M=1,2,4,8        # a sweep, gathered into a table
    gpipe-run -m experiment=demo                          # an experiment declares its own sweep

Before Hydra starts, the command line is checked (unknown group options, unknown keys, bad override
syntax): a mistake there is one line on stderr and exit code 2, nothing written. Values are checked
inside the job (see ``config.spec_from_config``): a bad one gives one line, exit code 1 and a
``failed`` metrics.json; in a sweep the other jobs still run and are gathered.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .config import spec_from_config
from .errors import UserError

CONF_DIR = Path(os.environ.get("GPIPE_CONF", Path(__file__).resolve().parents[2] / "conf"))
GROUPS = ("model", "data", "pipeline", "optim", "logger", "experiment")
_failures: list[str] = []


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def preflight(argv: list[str]) -> str | None:
    """One line describing what is wrong with the command line, or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    overrides = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as err:
        return str(err).strip().splitlines()[0]
    first: list[str] = []
    for ov in parsed:
        key = ov.key_or_group
        values = list(ov.sweep_string_iterator()) if ov.is_sweep_override() else [ov.get_value_element_as_str()]
        if key in GROUPS and not ov.is_delete():
            allowed = _options(key)
            for v in values:
                if v not in allowed and v != "null":
                    return f"{key}={v} is not a {key} config; allowed: {', '.join(allowed)}"
        if key.startswith("hydra"):
            continue
        first.append(f"{ov.get_key_element()}={values[0]}" if values else ov.input_line)
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            compose("config", overrides=first)
    except Exception as err:  # Hydra's composition errors: unknown keys, bad types for groups
        text = " ".join(str(err).split())
        return text.split(". ")[0] if len(text) > 200 else text
    finally:
        GlobalHydra.instance().clear()
    return None


def _plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> dict[str, Any]:
    from .metrics.summary import failed_metrics
    from .runner import resolve_device, run, write_json
    from .wandb_logger import log_run

    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    plain = _plain(cfg)
    try:
        spec = spec_from_config(plain, resolve_device)
    except UserError as err:
        metrics = failed_metrics(None, str(err), plain)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "metrics.json", metrics)
    else:
        from .multinode import run_distributed, task_env

        tenv = task_env()
        if tenv is not None:  # one task of a multi-task submitit/SLURM job: act as one rank
            os.environ.update(tenv)
            m = run_distributed(spec, out, "submitit")
            if m is None:  # not rank 0: rank 0 writes and logs
                return {}
            metrics = m
        else:
            metrics = run(spec, out)
        # wandb group: the experiment, else (in a sweep) the sweep folder's name
        group = spec.experiment or (Path(hc.sweep.dir).name if hc.mode.name == "MULTIRUN" else None)
        try:
            wb = log_run(spec.logger, out, plain, metrics, group)
            wandb_note = f"  wandb: {wb}" if wb else ""
        except Exception as err:  # logging must never lose the run
            wandb_note = f"  (wandb failed: {err})"
    if metrics["status"] != "ok":
        _failures.append(metrics["error"])
        print(f"gpipe-run: error: {metrics['error']}  [{out / 'metrics.json'}]", file=sys.stderr, flush=True)
    else:
        ev = metrics.get("eval") or {}
        acc = f"  accuracy {ev['accuracy']:.3f}" if "accuracy" in ev else ""
        print(f"K={metrics['pipeline']['K']} M={metrics['pipeline']['M']}: {metrics['throughput']:.1f} samples/s, "
              f"bubble {metrics['bubble_fraction']:.3f}{acc}  -> {out}{wandb_note}", flush=True)
    return metrics


def main() -> None:
    err = preflight(sys.argv[1:])
    if err:
        print(f"gpipe-run: error: {err}", file=sys.stderr)
        sys.exit(2)
    app()
    if _failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
