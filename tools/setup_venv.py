"""``make setup``: build ``.venv`` with CI's pinned torch, or over a torch this Python already has.

    python3 tools/setup_venv.py [--torch pinned|given|auto] [--offline 0|1|auto] [--wheelhouse DIR]

``--torch pinned`` (CI, this project's machines): torch and torchvision from ``requirements-torch.txt``,
then the exact pins of ``requirements.txt`` and the lint tools.

``--torch given`` (a GPU cluster node, a container with PyTorch preinstalled): the torch of the Python
that runs this script, never another. ``.venv`` is created from that Python and sees its packages
through a ``.pth`` file listing its site directories (``--system-site-packages`` would not do: where the
Python is itself a virtual environment, as on the lent GPU hosts, it exposes the *base* interpreter's
packages, not the ones holding torch). The project is installed by its ranges (``pyproject.toml``), so
whatever this Python already has in range is kept; what it lacks comes at the versions the tests ran
with (``requirements.txt``, as constraints). A torch below the floor (``gpipe_repro.supported``) is
refused in one line naming both versions.

``--offline 1``: from the wheelhouse only (``pip --no-index --find-links``; ``make wheelhouse`` built
it on a connected machine for this Python and platform). ``auto``: offline where the torch is given and
a wheelhouse is there.

The mode is written to ``.venv/.installed``; a later call with the same mode and nothing newer
(requirements, pyproject) does nothing, another mode rebuilds ``.venv``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUTS = (
    "pyproject.toml",
    "requirements.txt",
    "requirements-torch.txt",
    "requirements-lint.txt",
    "requirements-build.txt",
)
# what the project installs in a given-torch environment (pyproject's extras; torchvision comes with
# the host's torch, the lint tools stay on CI)
EXTRAS = "data,translation,slurm,test"


class SetupError(Exception):
    """One line for the user; setup stops with exit status 1."""


def _supported():  # noqa: ANN202 - the module, loaded by path (the project is not installed yet)
    spec = importlib.util.spec_from_file_location(
        "_gpipe_supported", ROOT / "src" / "gpipe_repro" / "supported.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def given_torch() -> str | None:
    """This Python's torch version (from its metadata: nothing imported), or None."""
    try:
        return md.version("torch")
    except md.PackageNotFoundError:
        return None


def site_dirs() -> list[str]:
    """The directories this Python imports installed packages from."""
    out = []
    for p in sys.path:
        if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir():
            out.append(str(Path(p).resolve()))
    return list(dict.fromkeys(out))


def read_lock(wheelhouse: Path) -> dict[str, str]:
    """The wheelhouse's header fields (``# key: value``) from its ``lock.txt``."""
    lock = wheelhouse / "lock.txt"
    if not lock.is_file():
        raise SetupError(
            f"OFFLINE=1: no wheelhouse at {wheelhouse} (its lock.txt is missing); build it on a "
            "connected machine with `make wheelhouse WHEEL_PY=X.Y WHEEL_PLATFORM=...` and copy it here"
        )
    fields = {}
    for line in lock.read_text().splitlines():
        if line.startswith("# ") and ": " in line:
            k, _, v = line[2:].partition(": ")
            fields[k.strip()] = v.strip()
    return fields


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, _, version = line.partition("==")
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def run(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "ERROR" in ln or "error:" in ln.lower()] or lines
        raise SetupError(f"{what} failed: {errors[-1].strip() if errors else r.returncode}")


def make_venv(venv: Path) -> list[str]:
    """A fresh venv from this Python; the pip command that installs into it. Without ensurepip
    (a Debian Python lacking python3-venv) the venv has no pip of its own: this Python's pip
    installs into it (``pip --python``)."""
    shutil.rmtree(venv, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    vpy = str(venv / "bin" / "python")
    if r.returncode == 0:
        return [vpy, "-m", "pip"]
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv")
    return [sys.executable, "-m", "pip", "--python", vpy]


def venv_site(venv: Path) -> Path:
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(out)


def installed(venv: Path) -> set[str]:
    """Distribution names the venv's Python sees (its own and, given torch, this Python's)."""
    code = (
        "import importlib.metadata as md\n"
        "print('\\n'.join(sorted({(d.metadata['Name'] or '').lower().replace('_', '-') "
        "for d in md.distributions()})))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return {n for n in out.split() if n}


def setup(venv: Path, torch: str, offline: bool, wheelhouse: Path, upgrade_pip: bool) -> str:
    """Build ``venv``; the one-line summary."""
    t0 = time.perf_counter()
    source = ["--no-index", "--find-links", str(wheelhouse)] if offline else []
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if offline:
        lock = read_lock(wheelhouse)
        if lock.get("python") != here:
            raise SetupError(
                f"the wheelhouse {wheelhouse} was built for Python {lock.get('python')} "
                f"(platform {lock.get('platform')}), this is Python {here}; rebuild it with "
                f"`make wheelhouse WHEEL_PY={here}`"
            )
    if torch == "given":
        version = given_torch()
        if version is None:
            raise SetupError(
                f"TORCH=given: {sys.executable} has no torch; install one there, or use TORCH=pinned"
            )
        err = _supported().check_torch(version, f"TORCH=given: {sys.executable}'s torch", ROOT)
        if err:
            raise SetupError(err)
    elif offline:
        raise SetupError(
            "OFFLINE=1 needs TORCH=given: the wheelhouse holds no torch (the host brings its own)"
        )
    pip = make_venv(venv)
    if torch == "given":
        (venv_site(venv) / "_gpipe_given_python.pth").write_text("\n".join(site_dirs()) + "\n")
    quiet = ["install", "-q", "--disable-pip-version-check", *source]
    if upgrade_pip and not offline:
        run([*pip, *quiet, "--upgrade", "pip"], "pip install --upgrade pip")
    if torch == "pinned":
        reqs = [
            "-r",
            "requirements-torch.txt",
            "-r",
            "requirements.txt",
            "-r",
            "requirements-lint.txt",
        ]
        run([*pip, *quiet, *reqs], "pip install -r requirements*.txt")
        run([*pip, *quiet, "--no-deps", "-e", "."], "pip install -e .")
    else:
        have = installed(venv)
        wanted = pins(ROOT / "requirements.txt") | pins(ROOT / "requirements-build.txt")
        constraints = venv / "constraints.txt"  # the tested versions of what this Python lacks
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in wanted.items() if n not in have))
        run(
            [*pip, *quiet, "-c", str(constraints), "-e", f".[{EXTRAS}]"],
            f"pip install -e .[{EXTRAS}]" + (f" from {wheelhouse} alone" if offline else ""),
        )
    vpy = str(venv / "bin" / "python")
    probe = subprocess.run(
        [vpy, "-c", "import torch, gpipe_repro; print(torch.__version__); print(torch.__file__)"],
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        raise SetupError(
            f"{vpy} cannot import torch and gpipe_repro: {probe.stderr.strip().splitlines()[-1]}"
        )
    version, where = probe.stdout.split()
    if torch == "given" and Path(where).resolve().is_relative_to(venv.resolve()):
        raise SetupError(f"a second torch was installed into {venv} ({where}); this is a bug")
    (venv / ".installed").write_text(mode(torch, offline) + "\n")
    return (
        f"setup: {venv} on Python {here} with torch {version} "
        f"({'this Python' + chr(39) + 's own' if torch == 'given' else 'pinned'}, {Path(where).parent}); "
        f"packages from {'the wheelhouse ' + str(wheelhouse) + ' alone' if offline else 'the index'}; "
        f"{time.perf_counter() - t0:.0f} s"
    )


def resolve(torch: str, offline: str, wheelhouse: Path) -> tuple[str, bool]:
    """The switches' ``auto`` decided: torch ``given`` where this Python has one; offline where the
    torch is given and a wheelhouse is there (so a GPU host with no index never asks one)."""
    if torch == "auto":
        torch = "given" if given_torch() else "pinned"
    if offline == "auto":
        return torch, torch == "given" and (wheelhouse / "lock.txt").is_file()
    return torch, offline == "1"


def mode(torch: str, offline: bool) -> str:
    return f"torch={torch} offline={int(offline)}"


def up_to_date(venv: Path, torch: str, offline: bool) -> bool:
    stamp = venv / ".installed"
    if not stamp.is_file() or stamp.read_text().strip() != mode(torch, offline):
        return False
    t = stamp.stat().st_mtime
    return all(not (ROOT / f).exists() or (ROOT / f).stat().st_mtime <= t for f in INPUTS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/setup_venv.py", description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=".venv")
    ap.add_argument("--torch", default="pinned", help="pinned | given | auto")
    ap.add_argument("--offline", default="0", help="0 | 1 | auto")
    ap.add_argument("--wheelhouse", default=".wheelhouse")
    ap.add_argument("--no-upgrade-pip", action="store_true")
    a = ap.parse_args(argv)
    os.chdir(ROOT)
    if a.torch not in ("pinned", "given", "auto"):
        print(f"setup: error: TORCH={a.torch!r}; allowed: pinned, given, auto", file=sys.stderr)
        return 2
    if a.offline not in ("0", "1", "auto", ""):
        print(f"setup: error: OFFLINE={a.offline!r}; allowed: 0, 1, auto", file=sys.stderr)
        return 2
    wheelhouse = Path(a.wheelhouse).resolve()
    torch, offline = resolve(a.torch, a.offline, wheelhouse)
    venv = Path(a.venv)
    if up_to_date(venv, torch, offline):
        return 0
    try:
        print(setup(venv, torch, offline, wheelhouse, not a.no_upgrade_pip), flush=True)
    except SetupError as err:
        print(f"setup: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
