"""Set-up on a host whose torch is given, offline (issue #34): the torch floor refused in one line, the
switches' ``auto``, the wheelhouse's platform tags and pruning, the requirement files agreeing with
pyproject; and, long, the whole of it from a fresh clone with no index (``make check-offline-setup``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from gpipe_repro.supported import check_torch, parse_version, torch_range

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def setup_venv():
    return _tool("setup_venv")


@pytest.fixture
def wheelhouse():
    return _tool("wheelhouse")


def test_a_torch_below_the_floor_is_refused_in_one_line_naming_both(
    setup_venv, tmp_path, capsys, monkeypatch
):
    floor = torch_range().floor
    major, minor = parse_version(floor)[:2]
    below = f"{major}.{minor - 1}.0+cu126"
    monkeypatch.setattr(setup_venv, "given_torch", lambda: below)
    venv = tmp_path / "venv"
    assert setup_venv.main(["--venv", str(venv), "--torch", "given", "--offline", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and below in err and f"torch >= {floor}" in err
    assert not venv.exists()  # nothing built


def test_the_supported_range_runs_from_the_floor_to_the_pin():
    rng = torch_range()
    assert rng.pinned and parse_version(rng.floor) <= parse_version(rng.pinned)
    assert check_torch(rng.floor) is None and check_torch(f"{rng.pinned}+cpu") is None
    assert check_torch("2.99.0") is None  # newer than the pin: allowed (untested)
    major, minor = parse_version(rng.floor)[:2]
    assert "below the supported floor" in (check_torch(f"{major}.{minor - 1}.9") or "")


def test_auto_sets_up_over_a_given_torch_from_the_wheelhouse_when_there_is_one(
    setup_venv, tmp_path, monkeypatch
):
    wh = tmp_path / "wh"
    monkeypatch.setattr(setup_venv, "given_torch", lambda: "2.11.0+cu130")
    assert setup_venv.resolve("auto", "auto", wh) == ("given", False)  # no wheelhouse: the index
    wh.mkdir()
    (wh / "lock.txt").write_text("# python: 3.12\n")
    assert setup_venv.resolve("auto", "auto", wh) == ("given", True)  # never asks an index
    monkeypatch.setattr(setup_venv, "given_torch", lambda: None)
    assert setup_venv.resolve("auto", "auto", wh) == ("pinned", False)  # CI: the pinned torch


def test_offline_needs_a_wheelhouse_for_this_python(setup_venv, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(setup_venv, "given_torch", lambda: "2.13.0")
    args = ["--venv", str(tmp_path / "v"), "--torch", "given", "--offline", "1"]
    assert setup_venv.main([*args, "--wheelhouse", str(tmp_path / "none")]) == 1
    assert "no wheelhouse at" in capsys.readouterr().err
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / "lock.txt").write_text("# python: 3.2\n# platform: manylinux_2_28_x86_64\n")
    assert setup_venv.main([*args, "--wheelhouse", str(wh)]) == 1
    err = capsys.readouterr().err
    assert "built for Python 3.2" in err and len(err.strip().splitlines()) == 1


def test_a_manylinux_target_accepts_every_older_glibc_tag(wheelhouse):
    tags = wheelhouse.platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert not any(t.startswith("manylinux_2_29") for t in tags)
    assert "manylinux2014_x86_64" in wheelhouse.platforms("manylinux2014_x86_64")


def _wheel(folder: Path, name: str, requires: list[str]) -> Path:
    path = folder / f"{name}-1.0-py3-none-any.whl"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA", f"Name: {name}\nVersion: 1.0\n{meta}")
    return path


def test_what_the_host_brings_leaves_with_what_only_it_needs(wheelhouse, tmp_path):
    w = {
        "app": _wheel(tmp_path, "app", ["big", "small", "old; python_version < '3.8'"]),
        "big": _wheel(tmp_path, "big", ["bigdep"]),
        "bigdep": _wheel(tmp_path, "bigdep", []),
        "small": _wheel(tmp_path, "small", ["shared"]),
        "shared": _wheel(tmp_path, "shared", []),
        "old": _wheel(tmp_path, "old", []),
    }
    env = wheelhouse.target_env("3.12", "manylinux_2_28_x86_64")
    assert wheelhouse.prune(w, {"app"}, env) == set(w) - {"old"}  # a marker for another Python
    kept = {n: p for n, p in w.items() if n != "big"}  # the host brings big
    assert wheelhouse.prune(kept, {"app"}, env) == {"app", "small", "shared"}


def test_the_requirement_files_pin_every_dependency_but_torch(wheelhouse):
    """The wheelhouse resolves requirements.txt: every range pyproject installs (its dependencies
    and the extras a given-torch set-up asks for) must be pinned there, torch and torchvision not."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    setup_venv = _tool("setup_venv")
    wanted = list(project["dependencies"])
    for extra in setup_venv.EXTRAS.split(","):
        wanted += project["optional-dependencies"][extra]
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = wheelhouse.pins(ROOT / "requirements.txt")
    names = {canonicalize_name(Requirement(r).name) for r in wanted} - {"torch"}
    assert names <= set(pins), names - set(pins)
    assert not {"torch", "torchvision"} & set(pins)
    torch_pin = wheelhouse.pins(ROOT / "requirements-torch.txt")["torch"]
    assert check_torch(torch_pin) is None  # CI's torch is inside the range it tests


@pytest.mark.long
@pytest.mark.timeout(900)
def test_a_fresh_clone_sets_up_offline_over_a_given_torch(tmp_path):
    """make check-offline-setup: about 90 s on 2 cores (host venv, wheelhouse, offline set-up)."""
    r = subprocess.run(
        [sys.executable, "tools/check_offline_setup.py", "--work", str(tmp_path / "w")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "make setup TORCH=given OFFLINE=1" in r.stdout and "ok in" in r.stdout
