"""``make reports-status``: a report is stale when code it depends on changed since its commit."""

import json
import subprocess
from pathlib import Path

from gpipe_repro.reports.status import ENTRIES, GPU_PROFILES, Entry, main, state
from gpipe_repro.studies.gpu_series import GPU_PROFILES as READ


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _repo(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "repo"
    (root / "src" / "measuring").mkdir(parents=True)
    (root / "src" / "rendering").mkdir(parents=True)
    (root / "src" / "measuring" / "a.py").write_text("x = 1\n")
    (root / "src" / "rendering" / "page.py").write_text("y = 1\n")
    _git(root.parent, "init", "-q", str(root))
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    return root, _git(root, "rev-parse", "--short", "HEAD")


def _report(root: Path, commits: list[str]) -> None:
    folder = root / "reports" / "r"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "provenance.json").write_text(json.dumps({"jobs": 1, "commits": commits}))


def _commit(root: Path, path: str, text: str) -> None:
    (root / path).write_text(text)
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "two")


def _made_with(root: Path, path: str, text: str) -> str:
    """Commit a new file ``path`` and record a report made at that commit; the commit."""
    (root / path).write_text(text)
    _git(root, "add", path)
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", f"add {path}")
    made = _git(root, "rev-parse", "--short", "HEAD")
    _report(root, [made])
    return made


ENTRY = Entry("r", "r", "make r", ("src/measuring",))


def test_a_change_to_rendering_code_leaves_a_report_current(tmp_path):
    root, made = _repo(tmp_path)
    _report(root, [made])
    _commit(root, "src/rendering/page.py", "y = 2\n")
    assert state(root, ENTRY) == (made, False, "no code it depends on changed since")


def test_a_change_to_code_it_depends_on_makes_it_stale(tmp_path):
    root, made = _repo(tmp_path)
    _report(root, [made])
    _commit(root, "src/measuring/a.py", "x = 2\n")
    commit, stale, why = state(root, ENTRY)
    assert (commit, stale) == (made, True) and "src/measuring/a.py" in why


def test_a_change_to_comments_docstrings_or_layout_leaves_it_current(tmp_path):
    root, _ = _repo(tmp_path)
    made = _made_with(root, "conf.yaml", "a: 1  # one\n")
    entry = Entry("r", "r", "make r", ("src/measuring", "conf.yaml"))
    _commit(root, "src/measuring/a.py", '"""What a is."""\n\n# why\nx = (\n    1\n)\n')
    _commit(root, "conf.yaml", "# the key\na: 1\n")
    assert state(root, entry) == (
        made,
        False,
        "no code it depends on changed since; 2 more changed only in comments, docstrings or layout",
    )
    _commit(root, "src/measuring/a.py", '"""What a is."""\nx = 1.0\n')  # the same value, not code
    assert state(root, entry)[1]
    _commit(root, "src/measuring/a.py", "x = 1  # as made\n")
    _commit(root, "conf.yaml", "# @package _global_\na: 1\n")  # a directive, not a comment
    commit, stale, why = state(root, entry)
    assert stale and "conf.yaml" in why and "1 more changed only" in why


def test_yaml_counts_its_types_and_order_and_docstrings_count_where_a_page_quotes_them(tmp_path):
    root, _ = _repo(tmp_path)
    _made_with(root, "sweep.yaml", "steps: 20\nflag: true\nparams:\n  K: 1,2\n  M: 1,4\n")
    entry = Entry("r", "r", "make r", ("sweep.yaml", "src/measuring"))
    for text in (
        "steps: 20.0\nflag: true\nparams:\n  K: 1,2\n  M: 1,4\n",  # an int made a float
        "steps: 20\nflag: 1\nparams:\n  K: 1,2\n  M: 1,4\n",  # a bool made an int
        "steps: 20\nflag: true\nparams:\n  M: 1,4\n  K: 1,2\n",  # the sweep's order
        "#@package _global_\nsteps: 20\nflag: true\nparams:\n  K: 1,2\n  M: 1,4\n",
    ):
        _commit(root, "sweep.yaml", text)
        assert state(root, entry)[1], text
    _commit(root, "sweep.yaml", "steps: 20  # as made\nflag: true\nparams: {K: '1,2', M: '1,4'}\n")
    assert not state(root, entry)[1]
    _commit(root, "src/measuring/a.py", '"""Quoted on the page."""\nx = 1\n')
    assert not state(root, entry)[1]
    quoted = Entry("r", "r", "make r", ("src/measuring",), docstrings=True)
    assert state(root, quoted)[1]


def test_no_provenance_several_commits_or_a_dirty_tree_are_stale(tmp_path):
    root, made = _repo(tmp_path)
    assert state(root, ENTRY)[1:] == (
        True,
        "no provenance.json: made before reports recorded their commit",
    )
    _report(root, [made, "abc1234"])
    assert state(root, ENTRY)[1] and "2 commits" in state(root, ENTRY)[2]
    _report(root, [f"{made}-dirty"])
    assert state(root, ENTRY)[1] and "uncommitted" in state(root, ENTRY)[2]
    _report(root, ["0123456"])
    assert state(root, ENTRY)[1] and "not in this repository" in state(root, ENTRY)[2]


def test_every_committed_report_is_listed_once(capsys):
    root = Path(__file__).resolve().parents[2]
    folders = {p.parent.name for p in (root / "reports").glob("*/*.md") if p.name != "README.md"}
    assert folders <= {e.folder for e in ENTRIES}
    assert len({(e.folder, e.provenance) for e in ENTRIES}) == len(ENTRIES)
    assert all(any((root / p).exists() for p in e.depends) for e in ENTRIES)
    assert main(["--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert all(f"| {e.name} |" in out for e in ENTRIES) and "report(s) stale" in out


def test_a_report_that_records_its_commit_in_its_own_json_is_read_there(tmp_path):
    """The soak writes no provenance.json: its soak.json records both runs' commit, ``a/b`` where
    they differ."""
    root, made = _repo(tmp_path)
    entry = Entry("s", "s", "make s", ("src/measuring",), provenance="s.json", commit_field="git")
    folder = root / "reports" / "s"
    folder.mkdir(parents=True)
    assert state(root, entry)[1:] == (True, "no s.json: made before reports recorded their commit")
    (folder / "s.json").write_text(json.dumps({"git": made, "steps": 3}))
    assert state(root, entry) == (made, False, "no code it depends on changed since")
    (folder / "s.json").write_text(json.dumps({"git": f"{made}/abc1234"}))
    assert state(root, entry)[1] and "2 commits" in state(root, entry)[2]
    (folder / "s.json").write_text(json.dumps({"steps": 3}))
    assert state(root, entry)[1] and "not recorded" in state(root, entry)[2]
    _commit(root, "src/measuring/a.py", "x = 2\n")
    (folder / "s.json").write_text(json.dumps({"git": made}))
    assert state(root, entry)[:2] == (made, True)


def test_the_tables_that_read_the_gpu_profiles_go_stale_when_a_gpu_check_replaces_them(tmp_path):
    """Tables 2 and 3 simulate a series from ``reports/gpu/profiles``: that folder is one of their
    dependencies (the one the page reads), and a new profile committed there makes them stale."""
    assert READ.as_posix() == GPU_PROFILES
    readers = {e.name for e in ENTRIES if GPU_PROFILES in e.depends}
    assert readers == {"table2", "table3"}
    repo, made = _repo(tmp_path)
    (repo / GPU_PROFILES).mkdir(parents=True)
    (repo / GPU_PROFILES / "p.json").write_text("{}\n")
    _git(repo, "add", ".")
    _commit(repo, "src/rendering/page.py", "y = 2\n")
    made = _git(repo, "rev-parse", "--short", "HEAD")
    _report(repo, [made])
    entry = Entry("r", "r", "make r", ("src/measuring", GPU_PROFILES))
    assert state(repo, entry)[1] is False
    _commit(repo, f"{GPU_PROFILES}/p.json", '{"layers": []}\n')
    assert state(repo, entry)[1] is True and GPU_PROFILES in state(repo, entry)[2]
