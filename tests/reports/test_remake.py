"""``make reports``: the stale reports' targets one at a time, in order, a failure not stopping the rest."""

import datetime as dt
import json
import subprocess
import time
from pathlib import Path

import pytest

from gpipe_repro.reports import remake as R
from gpipe_repro.reports.status import ENTRIES, Entry

MAKEFILE = """\
a:
\techo a >> ran.txt
b:
\techo b >> ran.txt; exit 3
c:
\techo c >> ran.txt
slow:
\tsleep 30; echo slow >> ran.txt
stubborn:
\ttrap '' TERM; sleep 30; echo stubborn >> ran.txt
"""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _repo(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "code.py").write_text("x = 1\n")
    (root / "Makefile").write_text(MAKEFILE)
    (root / ".gitignore").write_text("ran.txt\n")
    _git(tmp_path, "init", "-q", str(root))
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "one")
    return root, _git(root, "rev-parse", "--short", "HEAD")


def _made(root: Path, folder: str, commit: str) -> None:
    (root / "reports" / folder).mkdir(parents=True, exist_ok=True)
    (root / "reports" / folder / "provenance.json").write_text(
        json.dumps({"jobs": 1, "commits": [commit]})
    )


def test_only_stale_reports_run_once_per_target_with_the_read_ones_first(tmp_path):
    root, made = _repo(tmp_path)
    entries = [
        Entry("x", "x", "make a", ("src",)),
        Entry("y1", "y1", "make c", ("src",)),
        Entry("y2", "y2", "make c", ("src",)),  # two reports of one target: it runs once
        Entry("fresh", "fresh", "make b", ("other",)),
        Entry("hw", "hw", "make b", ("src",)),  # read by others: first
        Entry("gpu", "gpu", "make a", ("src",), cuda=True),
    ]
    for e in entries:
        _made(root, e.folder, made)
    (root / "src" / "code.py").write_text("x = 2\n")
    _git(root, "commit", "-qam", "two")
    steps, left = R.plan(root, entries, every=False, cuda=False)
    assert steps == [("b", ("hw",)), ("a", ("x",)), ("c", ("y1", "y2"))]
    assert left == ["gpu: needs a CUDA host (`make a`)"]
    steps, _ = R.plan(root, entries, every=True, cuda=True)
    assert [t for t, _ in steps] == ["a", "b", "c"]  # gpu, then hw's target, then the rest
    assert steps[0] == ("a", ("gpu", "x"))
    steps, _ = R.plan(root, entries, every=False, cuda=False, only=["y2", "fresh"])
    assert steps == [("c", ("y2",))]  # fresh is current: only names a choice among the stale


def test_a_target_that_ran_but_left_its_report_stale_is_named_with_its_commit(tmp_path):
    root, made = _repo(tmp_path)
    _made(root, "x", made)
    (root / "src" / "code.py").write_text("x = 2\n")
    _git(root, "commit", "-qam", "two")  # target a writes no report: x still records `made`
    entry = Entry("x", "x", "make a", ("src",))
    done, _ = R.remake(root, [("a", ("x",))], tmp_path / "logs", 60, say=lambda s: None)
    [line] = R.still_stale(done, R.states_after(root, done, [entry]))
    assert f"x is still stale after `make a`: it records commit {made}" in line


def test_a_failing_target_is_recorded_and_the_next_one_still_runs(tmp_path):
    root, _ = _repo(tmp_path)
    said: list[str] = []
    steps = [("a", ("x",)), ("b", ("y",)), ("c", ("z",))]
    done, skipped = R.remake(root, steps, tmp_path / "logs", 60, say=said.append)
    assert [(o.target, o.rc) for o in done] == [
        ("a", 0),
        ("b", 2),
        ("c", 0),
    ]  # make: 2 when a recipe fails
    assert skipped == []
    assert (root / "ran.txt").read_text().split() == ["a", "b", "c"]  # in order, one at a time
    assert "b" in (tmp_path / "logs" / "b.log").read_text()
    assert any("make b: failed (exit 2)" in s for s in said)


def test_a_target_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path):
    root, _ = _repo(tmp_path)
    t0 = time.monotonic()
    done, _ = R.remake(root, [("slow", ("s",)), ("a", ("x",))], tmp_path / "logs", 1.0,
                       say=lambda s: None)  # fmt: skip
    assert time.monotonic() - t0 < 20
    assert [(o.target, o.rc) for o in done] == [("slow", None), ("a", 0)]
    assert (root / "ran.txt").read_text().split() == ["a"]


def test_a_target_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    root, _ = _repo(tmp_path)
    t0 = time.monotonic()
    rc = R.run_target(root, "stubborn", tmp_path / "logs" / "s.log", 1.0, grace_s=1.0)
    assert rc is None and time.monotonic() - t0 < 20
    assert not (root / "ran.txt").exists()


def test_no_target_starts_once_until_has_passed(tmp_path):
    root, _ = _repo(tmp_path)
    clock = iter([dt.datetime(2026, 1, 1, 6, 59), dt.datetime(2026, 1, 1, 6, 59),
                  dt.datetime(2026, 1, 1, 7, 0)])  # fmt: skip
    done, skipped = R.remake(root, [("a", ("x",)), ("c", ("z",))], tmp_path / "logs", 60,
                             until=dt.datetime(2026, 1, 1, 7, 0), now=lambda: next(clock),
                             say=lambda s: None)  # fmt: skip
    assert [o.target for o in done] == ["a"] and skipped == ["c"]


def test_uncommitted_changes_outside_reports_refuse_in_one_line(tmp_path, capsys):
    root, _ = _repo(tmp_path)
    _made(root, "x", "abc")
    _git(root, "add", "reports")
    _git(root, "commit", "-qm", "report")
    (root / "reports" / "x" / "provenance.json").write_text("{}")  # a target's own output
    assert R.dirty(root) == []
    (root / "src" / "code.py").write_text("x = 3\n")
    assert R.main(["--root", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "uncommitted changes (src/code.py)" in err[0]


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--until", "7pm"], "--until='7pm'"),
        (["--timeout-min", "0"], "--timeout-min=0"),
        (["--only", "sim,tabel2"], "--only='tabel2'"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(argv, field, capsys):
    assert R.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "allowed" in err[0]


def test_every_committed_report_has_a_make_target():
    assert all(R.target(e) for e in ENTRIES)
    assert [e.name for e in ENTRIES if e.cuda] == ["gpu"]
    with pytest.raises(ValueError, match="make='run it'"):
        R.target(Entry("z", "z", "run it", ()))


def test_dry_run_in_this_repository_prints_targets_and_runs_nothing(capsys):
    root = Path(__file__).resolve().parents[2]
    assert R.main(["--root", str(root), "--dry-run", "--all"]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("make ")]
    targets = [x.split()[1] for x in lines]
    assert len(targets) == len(set(targets)) and "table2" in targets and "validate-hw" in targets
    assert targets.index("validate-hw") < targets.index("table2")
    assert "make fig3  # fig3, fig3_tricks" in out
