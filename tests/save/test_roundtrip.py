"""A save written at K = 2 loads at K = 1 and at K = 4 (another balance) bit-exactly, and training
continues with the loss the K = 2 run has next."""

import _save_ranks as r
import pytest
import torch

from gpipe_repro.engine import launch


def merged(results: list[dict], key: str) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for res in results:
        if res is not None:
            out.update(res[key])
    return out


def last_loss(results: list[dict]) -> float:
    (loss,) = [x for res in results for x in res["next"]]
    return loss


def assert_bit_equal(
    got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], what: str
) -> None:
    assert got.keys() == want.keys(), what
    for k in want:
        assert got[k].dtype == want[k].dtype, (what, k)
        assert torch.equal(got[k], want[k]), (what, k, (got[k] - want[k]).abs().max().item())


@pytest.mark.slow
def test_save_at_k2_loads_at_k1_and_k4_bit_equal(tmp_path):
    steps = 3
    written = launch(
        r.write_then_continue, 2, (2, [3, 5], str(tmp_path), steps, "rmsprop"), threads=1
    )
    saved = merged(written, "state")
    assert any(k.endswith("running_var") for k in saved)  # BatchNorm buffers are in the save
    assert any(k.endswith("momentum_buffer") for k in saved)  # and RMSprop's state
    assert sum(t.sum() for k, t in saved.items() if k.endswith("num_batches_tracked")) > 0
    path = str(tmp_path / f"save-{steps}")

    one = [r.load_then_continue(1, [8], path, "rmsprop")]
    four = launch(r.load_then_continue, 4, (4, [1, 2, 4, 1], path, "rmsprop"), threads=1)
    after = merged(written, "after")
    for what, loaded in (("K=1", one), ("K=4", four)):
        assert_bit_equal(merged(loaded, "state"), saved, f"{what} loaded")
        assert last_loss(loaded) == last_loss(written), what
    assert_bit_equal(merged(one, "after"), after, "K=1 after a step")
    # At K=4 the stem's output pair (h, h) crosses a stage boundary: it crosses once, as one
    # tensor, so h's gradients accumulate in one process's order and the update is bit-equal too.
    assert_bit_equal(merged(four, "after"), after, "K=4 after a step")
    assert [res["rng"] for res in four] == ["reseeded"] * 4  # another K: no rank's own stream
    assert len(one[0]["losses"]) == steps


def test_a_rank_of_two_cells_saves_and_loads_by_global_index(tmp_path):
    """Interleaved at K = 2, two cells per rank (stage 0 holds layers 0-1 and 4-5, stage 1 holds
    2-3 and 6-7): its save loads at K = 1 under 1f1b and at K = 2 under zb-h1 with other cells
    (stage 0 holds 0 and 4-6, stage 1 holds 1-3 and 7) bit-exactly, the next loss is the same,
    and one step later the state is too (all three sum each weight's micro-batch gradients first
    to last). Loading it back at its own layout restores each rank's own random streams."""
    steps = 2
    written = launch(
        r.write_then_continue,
        2,
        (2, [2, 2, 2, 2], str(tmp_path), steps, "rmsprop", "interleaved"),
        threads=1,
    )
    saved = merged(written, "state")
    assert {int(k.split(".")[1]) for k in saved if k.startswith("layers.")} == set(range(8))
    path = str(tmp_path / f"save-{steps}")
    one = [r.load_then_continue(1, [8], path, "rmsprop", "1f1b")]
    other = launch(r.load_then_continue, 2, (2, [1, 3, 3, 1], path, "rmsprop", "zb-h1"), threads=1)
    same = launch(
        r.load_then_continue, 2, (2, [2, 2, 2, 2], path, "rmsprop", "interleaved"), threads=1
    )
    for what, loaded in (("K=1 1f1b", one), ("K=2 zb-h1 other cells", other), ("K=2", same)):
        assert_bit_equal(merged(loaded, "state"), saved, f"{what} loaded")
        assert last_loss(loaded) == last_loss(written), what
        assert_bit_equal(merged(loaded, "after"), merged(written, "after"), f"{what} after")
    assert [res["rng"] for res in other] == ["reseeded"] * 2  # other cells: no rank's own stream
    assert [res["rng"] for res in same] == ["restored"] * 2
