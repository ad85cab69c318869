"""fetch_package with fake apt-get/dpkg on PATH: extract once, atomic under crashes and concurrency,
one-line errors that say how to provide the data instead."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from _shared import archive_reachable

from gpipe_repro.data.debian import MARKER, cache_root, fetch_package
from gpipe_repro.errors import UserError

APT = """#!/bin/sh
export PATH=/usr/bin:/bin
echo "$@" >> "$FAKE_LOG"
case "$FAKE_APT" in
  missing) echo "E: Unable to locate package $2" >&2; exit 100 ;;
  network) echo "E: Failed to fetch http://deb.debian.org/x  Temporary failure resolving" >&2; exit 100 ;;
esac
sleep "${FAKE_SLEEP:-0}"
echo "payload of $2" > "$2_1.0-1_all.deb"
"""
DPKG = """#!/bin/sh
export PATH=/usr/bin:/bin
echo "dpkg $@" >> "$FAKE_LOG"
[ "$FAKE_DPKG" = fail ] && { mkdir -p "$3/usr"; echo "dpkg-deb: error: not a Debian archive" >&2; exit 2; }
mkdir -p "$3/usr/share/datasets/fake"
cp "$2" "$3/usr/share/datasets/fake/data.bin"
"""


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("apt-get", APT), ("dpkg", DPKG)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_LOG", str(log))
    return bin_dir


def _downloads(tmp_path: Path) -> int:
    return sum(
        line.startswith("download") for line in (tmp_path / "calls.log").read_text().splitlines()
    )


def test_extracts_then_second_call_does_not_fetch(fake_tools: Path, tmp_path: Path):
    cache = tmp_path / "cache"
    root = fetch_package("dataset-fake", cache=cache)
    assert root == cache / "debian" / "dataset-fake"
    assert (root / "usr/share/datasets/fake/data.bin").read_text() == "payload of dataset-fake\n"
    assert (root / MARKER).is_file()
    assert fetch_package("dataset-fake", cache=cache) == root
    assert _downloads(tmp_path) == 1
    assert [p.name for p in (cache / "debian").iterdir() if not p.name.endswith(".lock")] == [
        "dataset-fake"
    ]


def test_cache_from_environment(fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "env-cache"))
    assert cache_root() == tmp_path / "env-cache"
    assert fetch_package("dataset-fake").parent.parent == tmp_path / "env-cache"


def test_failed_extract_leaves_nothing_that_looks_complete(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FAKE_DPKG", "fail")
    with pytest.raises(UserError, match=r"`dpkg -x dataset-fake_1.0-1_all.deb` failed \(exit 2\)"):
        fetch_package("dataset-fake", cache=cache)
    assert not (cache / "debian" / "dataset-fake").exists()
    assert [p.name for p in (cache / "debian").iterdir()] == [
        ".dataset-fake.lock"
    ]  # temp folder gone
    monkeypatch.setenv("FAKE_DPKG", "ok")
    assert (fetch_package("dataset-fake", cache=cache) / MARKER).is_file()


def test_stale_folder_without_marker_is_replaced(fake_tools: Path, tmp_path: Path):
    stale = tmp_path / "cache" / "debian" / "dataset-fake"
    (stale / "half").mkdir(parents=True)
    root = fetch_package("dataset-fake", cache=tmp_path / "cache")
    assert not (root / "half").exists() and (root / MARKER).is_file()


def test_concurrent_callers_fetch_once(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FAKE_SLEEP", "0.5")
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(fetch_package("dataset-fake", cache=tmp_path))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert len(results) == 3 and len(set(results)) == 1
    assert _downloads(tmp_path) == 1


def test_missing_apt_get_says_how_to_provide_the_data(fake_tools: Path, tmp_path: Path):
    (fake_tools / "apt-get").unlink()
    with pytest.raises(UserError) as err:
        fetch_package("dataset-fake", cache=tmp_path, hint="set data.root=/path/with/the idx files")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("`apt-get` not found")
    assert "packages.debian.org/dataset-fake" in msg and "dpkg -x" in msg
    assert msg.endswith("or set data.root=/path/with/the idx files")


def test_unknown_package_says_to_run_apt_get_update(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FAKE_APT", "missing")
    with pytest.raises(UserError) as err:
        fetch_package("dataset-fake", cache=tmp_path)
    msg = str(err.value)
    assert "\n" not in msg
    assert "run `apt-get update` once" in msg and "dataset-fake" in msg
    assert not (tmp_path / "debian" / "dataset-fake").exists()


def test_other_apt_failure_shows_apts_error_line(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FAKE_APT", "network")
    with pytest.raises(
        UserError, match=r"failed \(exit 100\): E: Failed to fetch .*Temporary failure"
    ):
        fetch_package("dataset-fake", cache=tmp_path)


def test_subprocess_timeout_is_bounded(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("FAKE_SLEEP", "5")
    with pytest.raises(UserError, match="did not finish within 1 s"):
        fetch_package("dataset-fake", cache=tmp_path, timeout_s=1)


def test_bad_name_rejected(tmp_path: Path):
    with pytest.raises(ValueError, match="not a Debian package name"):
        fetch_package("../etc", cache=tmp_path)


@pytest.mark.network
def test_real_fashion_mnist_package(tmp_path: Path):
    from gpipe_repro.data.fashion_mnist import load_fashion_mnist

    with archive_reachable():
        splits, _ = load_fashion_mnist(cache=str(tmp_path))
    (x_tr, y_tr), (x_te, y_te) = splits["train"], splits["test"]
    assert tuple(x_tr.shape) == (60_000, 1, 28, 28) and tuple(x_te.shape) == (10_000, 1, 28, 28)
    assert y_tr.bincount().tolist() == [6000] * 10 and y_te.bincount().tolist() == [1000] * 10
