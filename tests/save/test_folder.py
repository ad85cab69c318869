"""Save folders: the marker, ``latest`` (crashed writes ignored), keeping N, and broken saves."""

import json
import shutil

import _save_ranks as r
import pytest

from gpipe_repro.save import SaveError, latest, open_save, resolve
from gpipe_repro.save.folder import MARKER, META, list_files


def test_a_save_holds_every_part(k1_save):
    files = list_files(k1_save)
    assert json.loads((k1_save / MARKER).read_text())["files"] == files
    assert {".metadata", META, "rng/stage-0.replica-0.json"} <= files.keys()
    meta = json.loads((k1_save / META).read_text())
    assert meta["step"] == meta["data_position"]["step"] == 2
    assert len(meta["losses"]) == 2 and all(isinstance(x, float) for x in meta["losses"])
    assert meta["layout"] == {"K": 1, "replicas": 1, "balance": [8]}
    assert meta["run_config"] == {"seed": 0}
    rng = json.loads((k1_save / "rng/stage-0.replica-0.json").read_text())
    assert {"torch", "cuda", "python", "numpy"} <= rng.keys()


def test_latest_ignores_crashed_and_unfinished_writes_and_keep_prunes(tmp_path):
    with r.one_thread():
        run = r.Run(1, [8], "sgd")
        for step in (1, 2, 3):
            run.train(step - 1, step)
            run.save(str(tmp_path), step, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["save-2", "save-3"]
    crashed = tmp_path / "save-9.tmp-0123abcd"  # a write that died before the rename
    (crashed / "rng").mkdir(parents=True)
    (crashed / META).write_text("{}")
    (tmp_path / "save-7").mkdir()  # renamed, but died before the marker
    (tmp_path / "save-7" / META).write_text("{}")
    assert latest(tmp_path) == tmp_path / "save-3"
    assert resolve("auto", tmp_path) == tmp_path / "save-3"
    assert resolve(str(tmp_path), tmp_path) == tmp_path / "save-3"
    with pytest.raises(SaveError, match="not a complete save"):
        open_save(tmp_path / "save-7")


def test_latest_of_nothing(tmp_path):
    assert latest(tmp_path) is None
    assert latest(tmp_path / "absent") is None
    assert resolve("auto", tmp_path) is None


def _one_line(path) -> str:
    with pytest.raises(SaveError) as info:
        open_save(path)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_missing_incomplete_and_truncated_saves_are_one_line(k1_save, tmp_path):
    assert _one_line(tmp_path / "save-5").startswith(f"no save at {tmp_path / 'save-5'}")
    broken = tmp_path / "save-2"
    shutil.copytree(k1_save, broken)
    data = sorted(broken.glob("*.distcp"))[0]
    data.write_bytes(data.read_bytes()[:100])
    assert f"is corrupt: {data.name} has 100 bytes" in _one_line(broken)
    (broken / MARKER).unlink()
    assert "is not a complete save" in _one_line(broken)


def _fake(directory, step: int, run: str | None) -> None:
    folder = directory / f"save-{step}"
    folder.mkdir(parents=True)
    (folder / META).write_text(json.dumps({"step": step, "run": run}))
    (folder / MARKER).write_text("{}")


def test_latest_and_prune_see_one_runs_saves_only(tmp_path):
    from gpipe_repro.save import prune, run_of

    for step, run in ((2, "old"), (6, "old"), (3, "new"), (4, "new"), (8, None)):
        _fake(tmp_path, step, run)
    assert run_of(tmp_path / "save-6") == "old" and run_of(tmp_path / "save-8") is None
    assert latest(tmp_path, "new") == tmp_path / "save-4"  # not the old run's save-6
    assert latest(tmp_path) == tmp_path / "save-8"  # no run given: any save
    assert resolve("auto", tmp_path, "new") == tmp_path / "save-4"
    gone = prune(tmp_path, keep=1, run="new")
    assert gone == [tmp_path / "save-3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["save-2", "save-4", "save-6", "save-8"]


def test_marked_lists_this_runs_and_unreadable_saves_newest_first(tmp_path):
    from gpipe_repro.save.folder import marked

    def make(name: str, run: str | None, mark: bool = True) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / META).write_text("{" if run is None else json.dumps({"run": run}))
        if mark:
            (tmp_path / name / MARKER).write_text("{}")

    make("save-1", "a")
    make("save-5", "b")  # another run's
    make("save-3", None)  # its record cannot be read: whoever's, listed
    make("save-9", "a", mark=False)  # never finished
    make("save-2.tmp-0123abcd", "a")
    assert marked(tmp_path, "a") == [(3, tmp_path / "save-3"), (1, tmp_path / "save-1")]
    assert [s for s, _ in marked(tmp_path, None)] == [5, 3, 1]
    assert marked(tmp_path / "missing", "a") == []
