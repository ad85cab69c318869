"""``make wheelhouse``: the project's dependencies as wheels in one folder, for a host with no index.

    python tools/wheelhouse.py --out .wheelhouse [--python 3.12] [--platform manylinux_2_28_x86_64]
                               [--host-brings "numpy scipy ..."]

A GPU cluster node (or a container) often brings its own torch, built for its CUDA, and reaches no
package index. What the project needs besides torch and torchvision travels as wheels prepared on a
connected machine: every pin of ``requirements.txt`` (the versions the tests ran with) and everything
they depend on, resolved for the *target's* Python and platform (``--python``, ``--platform``: binary
wheels such as wandb's, rpds-py's, regex's and lxml's are built per platform; default: this
interpreter's). PyPI ships a few pure-Python packages as source only (``SOURCE_ONLY``): they are built
into universal wheels here first, so the host never builds anything.

``--host-brings``: packages the target already has (its scientific stack), left out together with
those of their dependencies nothing else needs — a host's ``pip install --no-index`` then keeps its own
(``tools/setup_venv.py``). ``lock.txt`` beside the wheels names every wheel's version, the target, and
what the host must bring; ``make setup TORCH=given OFFLINE=1`` installs from the folder alone.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ModuleNotFoundError:  # a bare Python: the copy pip carries (this script needs pip anyway)
    from pip._vendor.packaging.markers import Marker  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import (  # type: ignore[no-redef]
        canonicalize_name,
        parse_wheel_filename,
    )

ROOT = Path(__file__).resolve().parents[1]
# What the host gives and the wheelhouse never holds: a torch built for the host's CUDA, and the
# torchvision that pairs with it.
GIVEN = ("torch", "torchvision")
# Pure-Python packages PyPI ships only as source at the pinned version: built into wheels here.
SOURCE_ONLY = ("antlr4-python3-runtime", "pysword")
# The build backend of ``pip install -e .`` (pyproject's build-system): the isolated build
# environment takes it from the wheelhouse too.
BUILD_REQUIREMENTS = ROOT / "requirements-build.txt"


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a requirements file (comments, ``-r`` and blanks skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==":
            raise SystemExit(f"wheelhouse: error: {path.name}: {line!r} is not an exact pin (==)")
        out[canonicalize_name(req.name)] = spec[0].version
    return out


def platforms(platform: str) -> list[str]:
    """The tags a host of ``platform`` accepts: ``manylinux_2_N_<arch>`` means every glibc tag up to
    2.N (pip matches tags exactly), with the legacy aliases (manylinux1/2010/2014)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    legacy = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
    if m is None:
        m2 = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
        if m2 is None:
            return [platform]
        glibc = {v: k for k, v in legacy.items()}[m2.group(1)]
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", f"manylinux_2_{glibc}_{m2.group(2)}")
        assert m is not None
    top, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{n}_{arch}" for n in range(top, 4, -1)]
    tags += [f"{name}_{arch}" for n, name in legacy.items() if n <= top]
    return tags


def target_env(python: str, platform: str | None) -> dict[str, str]:
    """The environment markers are evaluated in: the target's Python and (Linux) platform."""
    major, minor = python.split(".")[:2]
    env = {
        "python_version": f"{major}.{minor}",
        "python_full_version": f"{major}.{minor}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    if platform is None or platform.startswith(("manylinux", "linux", "musllinux")):
        arch = (platform or "").rsplit("_", 1)[-1] if platform else None
        env |= {"sys_platform": "linux", "os_name": "posix", "platform_system": "Linux"}
        if arch:
            env["platform_machine"] = arch
    return env


def requires(wheel: Path, env: dict[str, str]) -> set[str]:
    """The names a wheel depends on, its markers evaluated for the target (no extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out = set()
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or Marker(str(req.marker)).evaluate({**env, "extra": ""}):
            out.add(canonicalize_name(req.name))
    return out


def prune(wheels: dict[str, Path], roots: set[str], env: dict[str, str]) -> set[str]:
    """The names reachable from ``roots`` through the wheels' dependencies (what must stay)."""
    keep, todo = set(), [r for r in roots if r in wheels]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo += [d for d in requires(wheels[name], env) if d in wheels and d not in keep]
    return keep


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        tail = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        missing = next(
            (ln for ln in tail if "No matching distribution" in ln), tail[-1] if tail else ""
        )
        raise SystemExit(
            f"wheelhouse: error: pip {args[0]} failed: {missing.strip()}"
            + (
                f" (a package with no wheel for the target: add it to SOURCE_ONLY in {Path(__file__).name})"
                if "No matching distribution" in missing
                else ""
            )
        )


def build(
    out: Path,
    python: str | None,
    platform: str | None,
    host_brings: list[str],
    requirements: Path,
) -> dict[str, str]:
    """Fill ``out`` with the wheels and write ``out/lock.txt``; return the lock (name -> version)."""
    wanted = pins(requirements)
    given = [g for g in GIVEN if g in wanted]
    if given:
        raise SystemExit(
            f"wheelhouse: error: {requirements.name} pins {', '.join(given)}; the host gives them "
            "(requirements-torch.txt holds CI's)"
        )
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    python = python or here
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    target: list[str] = ["--only-binary=:all:"]
    if python != here or platform:
        target += ["--python-version", python, "--implementation", "cp"]
        for tag in platforms(platform) if platform else []:
            target += ["--platform", tag]
    source = [f"{n}=={wanted[n]}" for n in SOURCE_ONLY if n in wanted]
    with tempfile.TemporaryDirectory() as tmp:
        if source:  # pure Python: a wheel built here installs on any host
            pip("wheel", "--no-deps", "--no-cache-dir", "-q", "-w", tmp, *source)
            for w in Path(tmp).glob("*.whl"):
                tags = parse_wheel_filename(w.name)[3]
                if any(t.platform != "any" for t in tags):
                    raise SystemExit(f"wheelhouse: error: {w.name} is not pure Python")
                w.rename(out / w.name)
    build_pins = [f"{n}=={v}" for n, v in pins(BUILD_REQUIREMENTS).items()]
    pip(
        "download", "-q", "--no-cache-dir", *target, "--find-links", str(out), "-d", str(out),
        "-r", str(requirements), *build_pins,
    )  # fmt: skip
    wheels = {canonicalize_name(parse_wheel_filename(w.name)[0]): w for w in out.glob("*.whl")}
    env = target_env(python, platform)
    brings = {canonicalize_name(n) for n in host_brings}
    roots = (set(wanted) | {canonicalize_name(b.split("==")[0]) for b in build_pins}) - brings
    # what the host brings, and what only those need, leaves; what a kept package needs stays
    keep = prune({n: w for n, w in wheels.items() if n not in brings}, roots, env)
    for name, w in wheels.items():
        if name not in keep:
            w.unlink()
    lock = {n: str(parse_wheel_filename(wheels[n].name)[1]) for n in sorted(keep)}
    lines = [
        f"# make wheelhouse ({Path(__file__).name}), {time.strftime('%Y-%m-%d')}: "
        f"Python {python}, platform {platform or 'this host'}",
        f"# python: {python}",
        f"# platform: {platform or 'host'}",
        f"# host brings: {' '.join(sorted(brings | set(GIVEN)))}",
        *(f"{n}=={v}" for n, v in lock.items()),
    ]
    (out / "lock.txt").write_text("\n".join(lines) + "\n")
    return lock


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/wheelhouse.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".wheelhouse")
    ap.add_argument("--python", default="", help="target Python, e.g. 3.12 (default: this one)")
    ap.add_argument(
        "--platform", default="", help="e.g. manylinux_2_28_x86_64 (default: this host)"
    )
    ap.add_argument("--host-brings", default="", help="packages the target has (space-separated)")
    ap.add_argument("--requirements", default=str(ROOT / "requirements.txt"))
    a = ap.parse_args(argv)
    if a.python and not re.fullmatch(r"3\.\d+", a.python):
        print(f"wheelhouse: error: --python={a.python!r}; allowed: 3.N, e.g. 3.12", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out = Path(a.out)
    lock = build(
        out, a.python or None, a.platform or None, a.host_brings.split(), Path(a.requirements)
    )
    size = sum(w.stat().st_size for w in out.glob("*.whl"))
    print(
        f"wheelhouse: {len(lock)} wheels, {size / 2**20:.1f} MiB in {out} "
        f"({time.perf_counter() - t0:.0f} s); lock: {out / 'lock.txt'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
