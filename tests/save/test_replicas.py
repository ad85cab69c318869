"""With data-parallel replicas only replica 0 writes tensors; every rank writes its RNG states."""

import _save_ranks as r
import pytest
import torch
import torch.distributed.checkpoint as dcp

from gpipe_repro.engine import launch


@pytest.mark.slow
def test_two_replicas_of_two_stages_save_once_and_load_at_k1(tmp_path):
    res = launch(r.replicated_save, 4, (str(tmp_path), 2), threads=1)
    path = tmp_path / "save-2"
    assert {x["path"] for x in res} == {str(path)}
    assert sorted(p.name for p in (path / "rng").iterdir()) == [
        f"stage-{s}.replica-{d}.json" for s in (0, 1) for d in (0, 1)
    ]
    md = dcp.FileSystemReader(path).read_metadata()
    assert {info.relative_path for info in md.storage_data.values()} == {
        "__0_0.distcp",
        "__1_0.distcp",
    }
    by_rank = {(x["stage"], x["replica"]): x["state"] for x in res}
    for s in (0, 1):  # the replicas really are identical copies
        assert all(torch.equal(by_rank[s, 0][k], by_rank[s, 1][k]) for k in by_rank[s, 0])
    one = r.load_then_continue(1, [8], str(path), "rmsprop")
    want = {**by_rank[0, 0], **by_rank[1, 0]}
    assert one["state"].keys() == want.keys()
    assert all(torch.equal(one["state"][k], want[k]) for k in want)
    assert one["rng"] == "reseeded"
