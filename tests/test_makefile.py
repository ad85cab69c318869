"""`make test` and `make test-fast` run the `timed` tests (tests/conftest.py's TIMED) in a second
phase that collects only their files: a TIMED entry whose file the Makefile misses would silently
never run. And the helper that runs a make target bounds it, its whole process group killed."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from _shared import make, wait_for

ROOT = Path(__file__).resolve().parents[1]


def _timed_phase(target: str) -> list[str]:
    """The words of the target's pytest command that selects the timed tests (``make -n``: printed,
    not run)."""
    out = subprocess.run(
        ["make", "-n", "-s", target, "STAMP="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    phases = [line for line in out.splitlines() if "pytest" in line and "and timed" in line]
    assert len(phases) == 1, out
    return shlex.split(phases[0].split("||")[0])


def _timed_list(config: pytest.Config) -> tuple[str, ...]:
    """tests/conftest.py's TIMED, from the conftest module pytest loaded."""
    root = ROOT / "tests" / "conftest.py"
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", None) == str(root):
            return tuple(plugin.TIMED)
    raise AssertionError(f"{root} is not loaded")


@pytest.mark.parametrize("target", ["test", "test-fast"])
def test_the_timed_phase_collects_every_timed_tests_file_and_only_those(target, pytestconfig):
    words = _timed_phase(target)
    files = {w for w in words if w.startswith("tests/")}
    wanted = {entry.split("::")[0] for entry in _timed_list(pytestconfig)}
    assert files == wanted, (sorted(files ^ wanted), words)
    assert all((ROOT / f).is_file() for f in files)


def _command(target: str) -> str:
    out = subprocess.run(
        ["make", "-n", "-s", target, "STAMP="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (line,) = [ln for ln in out.splitlines() if "gpipe-run" in ln]
    return line.strip()


def test_make_demo_writes_its_sweep_folder_and_only_demo_publish_writes_reports():
    """Issue #36 finding 8: `make demo` rewrote the committed reports/demo/ files. The Makefile,
    the experiment's README and the config's header say the same commands."""
    demo, publish = _command("demo"), _command("demo-publish")
    assert demo == ".venv/bin/gpipe-run -m experiment=demo sweep.publish=false"
    assert publish == ".venv/bin/gpipe-run -m experiment=demo"  # the canonical, publishing one
    readme = (ROOT / "experiments" / "demo" / "README.md").read_text()
    assert f"`make demo` (= `{demo}`" in " ".join(readme.split())
    assert f"`make demo-publish` (= `{publish}`)" in readme
    header = (ROOT / "conf" / "experiment" / "demo.yaml").read_text()
    assert f"# make demo  ==  {demo.removeprefix('.venv/bin/')}" in header
    words = " ".join((ROOT / "README.md").read_text().split())
    assert "`make demo` never touches the committed `reports/demo/` (`make demo-publish`" in words


def test_a_make_target_past_its_bound_leaves_no_process_behind(tmp_path):
    """The quick-target tests run ``make``, which starts the runs: past the bound the helper kills
    the whole group, not make alone (a run orphaned by a killed make kept 2 cores busy)."""
    (tmp_path / "Makefile").write_text("slow:\n\tsleep 300 & echo $$! > pid; sleep 300\n")
    with pytest.raises(AssertionError, match="still running after 1 s"):
        make("slow", tmp_path, bound=1, cwd=tmp_path)
    pid = int((tmp_path / "pid").read_text())

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    wait_for(gone, 10, "the recipe's background sleep to be killed")
