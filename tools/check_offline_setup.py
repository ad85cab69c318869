"""``make check-offline-setup``: a fresh clone set up with no index reachable, over a torch it is given.

    python3 tools/check_offline_setup.py [--work DIR] [--keep]

What a GPU cluster node with PyTorch preinstalled and no internet goes through, on this machine:

1. a "host" Python: a virtual environment holding only CI's pinned torch (``requirements-torch.txt``,
   installed the ordinary way), standing for the cluster's Python;
2. a fresh clone of this repository's HEAD; ``make wheelhouse`` in it (on the connected side);
3. with no index reachable — pip's configuration files ignored (``PIP_CONFIG_FILE=/dev/null``: no
   extra index, no local wheel folder), its index an address nothing answers on, and, where this
   machine allows it, no network but loopback (``unshare --net``) — ``make setup TORCH=given OFFLINE=1``
   in the clone over the host Python;
4. checks: the clone's ``gpipe-run`` trains two steps (``metrics.json`` status ok), ``import
   gpipe_repro`` works, torch comes from the host Python and no second torch was installed, and
   ``make gpu-check`` on this GPU-less host says its one line and exits 0 without asking an index.

Prints each phase's seconds and the wheelhouse's size; exit status 1 on the first check that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class CheckFailed(Exception):
    pass


def sh(
    cmd: list[str], what: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if r.returncode:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise CheckFailed(f"{what} failed (exit {r.returncode}):\n{tail}")
    return r.stdout


# a network namespace of one's own holding only loopback, brought up (the launcher's rendezvous and
# gloo talk over 127.0.0.1, as on any host)
JAIL = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def no_network() -> list[str]:
    """The ``JAIL`` prefix where this machine allows it (else nothing: the index is unreachable)."""
    probe = subprocess.run([*JAIL, "true"], capture_output=True)
    return JAIL if probe.returncode == 0 else []


def check(work: Path) -> list[str]:
    lines = []
    t = time.perf_counter()
    host = work / "host"
    sh([sys.executable, "-m", "venv", str(host)], "python -m venv host")
    sh([str(host / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements-torch.txt")], "pip install torch into host")  # fmt: skip
    hpy = str(host / "bin" / "python")
    torch_v = sh([hpy, "-c", "import torch; print(torch.__version__)"], "host torch").strip()
    lines.append(f"host Python with torch {torch_v} only: {time.perf_counter() - t:.0f} s")

    t = time.perf_counter()
    clone = work / "clone"
    sh(["git", "clone", "-q", str(ROOT), str(clone)], "git clone")
    wheelhouse = work / "wheelhouse"
    sh(
        ["make", "-C", str(clone), "wheelhouse", f"PY={hpy}", f"WHEELHOUSE={wheelhouse}"],
        "make wheelhouse",
    )
    wheels = list(wheelhouse.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    lines.append(
        f"fresh clone + make wheelhouse: {len(wheels)} wheels, {size:.1f} MiB: "
        f"{time.perf_counter() - t:.0f} s"
    )

    offline = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work / "home"),
        "PIP_CONFIG_FILE": os.devnull,  # no extra index, no local wheel folder from this machine
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # nothing answers there
        "PIP_NO_CACHE_DIR": "1",
        "WANDB_MODE": "disabled",
    }
    jail = no_network()
    t = time.perf_counter()
    make = ["make", "-C", str(clone), f"PY={hpy}", f"WHEELHOUSE={wheelhouse}"]
    sh(
        [*jail, *make, "setup", "TORCH=given", "OFFLINE=1"],
        "make setup TORCH=given OFFLINE=1",
        offline,
    )
    lines.append(
        f"make setup TORCH=given OFFLINE=1 ({'no network but loopback: unshare -rn' if jail else 'index unreachable'}): "
        f"{time.perf_counter() - t:.0f} s"
    )

    t = time.perf_counter()
    venv = clone / ".venv"
    run_dir = work / "run"
    sh(
        [*jail, str(venv / "bin" / "gpipe-run"), "model.hidden=16", "model.depth=2", "train.steps=2",
         "train.warmup_steps=0", "train.eval=false", "logger=none", f"hydra.run.dir={run_dir}"],
        "gpipe-run", offline, cwd=clone,
    )  # fmt: skip
    status = json.loads((run_dir / "metrics.json").read_text())["status"]
    if status != "ok":
        raise CheckFailed(f"gpipe-run's metrics.json says status {status!r}")
    where = sh([str(venv / "bin" / "python"), "-c", "import gpipe_repro, torch; print(torch.__file__)"], "import", offline)  # fmt: skip
    if not Path(where.strip()).resolve().is_relative_to(host.resolve()):
        raise CheckFailed(f"torch comes from {where.strip()}, not the host Python {host}")
    second = list(venv.glob("lib/python*/site-packages/torch"))
    if second:
        raise CheckFailed(f"a second torch was installed: {second[0]}")
    out = sh([*jail, *make, "gpu-check"], "make gpu-check", offline)
    if "skipped, no CUDA device" not in out:
        raise CheckFailed(f"make gpu-check said: {out.strip()[-300:]}")
    lines.append(
        f"gpipe-run (2 steps, status ok), import gpipe_repro, torch from the host, no second torch, "
        f"make gpu-check's one line: {time.perf_counter() - t:.0f} s"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="tools/check_offline_setup.py", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--work", help="folder to work in (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="gpipe-offline-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        for line in check(work):
            print(f"check-offline-setup: {line}", flush=True)
    except CheckFailed as err:
        print(f"check-offline-setup: FAILED: {err}", file=sys.stderr)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"check-offline-setup: ok in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
