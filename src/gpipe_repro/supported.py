"""The torch versions this project runs on: the floor, stated once, and the tested pin.

The floor is ``pyproject.toml``'s ``torch>=X.Y`` dependency (read from the installed package's metadata,
or from the source tree's ``pyproject.toml`` before anything is installed); the top of the range is the
version CI pins, ``requirements-torch.txt``'s ``torch==``. Across the range the project calls the same
torch APIs (``tests/test_torch_range.py`` names the recent ones the CUDA paths use; run it, and the CPU
suite, under another torch to check it). A torch below the floor is refused in one line naming both
versions (``make setup TORCH=given``, ``make gpu-check``); a newer one than the pin is allowed
(untested).

Standard library only: ``tools/setup_venv.py`` loads this file with the host's Python before torch's
environment is set up.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["TorchRange", "torch_range", "parse_version", "check_torch"]

_ROOT = Path(__file__).resolve().parents[2]  # the source tree (an editable install, a clone)


class TorchRange:
    """The supported range: ``floor`` (refused below) and ``pinned`` (what CI tests)."""

    def __init__(self, floor: str, pinned: str | None) -> None:
        self.floor, self.pinned = floor, pinned

    def __str__(self) -> str:
        return f"{self.floor} to {self.pinned}" if self.pinned else f">= {self.floor}"


def _floor_from(requirements: list[str]) -> str | None:
    for req in requirements:
        m = re.fullmatch(r"\s*torch\s*>=\s*([0-9][0-9.]*)\s*(?:;.*)?", req)
        if m:
            return m.group(1)
    return None


def _pyproject_dependencies(path: Path) -> list[str]:
    text = path.read_text()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the dependency strings, one per line
        return re.findall(r'^\s*"([^"]+)",?\s*$', text, flags=re.M)
    return list(tomllib.loads(text)["project"]["dependencies"])


def torch_range(root: Path | None = None) -> TorchRange:
    """The floor from pyproject.toml (source tree first, else the installed metadata) and the pin."""
    root = root or _ROOT
    floor = None
    if (root / "pyproject.toml").is_file():
        floor = _floor_from(_pyproject_dependencies(root / "pyproject.toml"))
    if floor is None:
        from importlib.metadata import PackageNotFoundError, requires

        try:
            floor = _floor_from(requires("gpipe-repro") or [])
        except PackageNotFoundError:
            floor = None
    if floor is None:
        raise RuntimeError("pyproject.toml states no torch floor (a dependency 'torch>=X.Y')")
    pinned = None
    pin_file = root / "requirements-torch.txt"
    if pin_file.is_file():
        m = re.search(r"^torch==([0-9][0-9.]*)", pin_file.read_text(), flags=re.M)
        pinned = m.group(1) if m else None
    return TorchRange(floor, pinned)


def parse_version(version: str) -> tuple[int, ...]:
    """``2.11.0+cu130`` -> (2, 11, 0): the release numbers (local and pre-release labels dropped)."""
    m = re.match(r"(\d+(?:\.\d+)*)", version)
    if m is None:
        raise ValueError(f"torch version {version!r} is not a version number")
    return tuple(int(p) for p in m.group(1).split("."))


def check_torch(version: str, where: str = "torch", root: Path | None = None) -> str | None:
    """One line when ``version`` is below the floor (None when it is supported)."""
    rng = torch_range(root)
    if parse_version(version) < parse_version(rng.floor):
        return (
            f"{where} {version} is below the supported floor: torch >= {rng.floor} "
            f"(supported: {rng}; pyproject.toml)"
        )
    return None
