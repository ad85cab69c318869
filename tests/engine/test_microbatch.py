import pytest
import torch

from gpipe_repro.engine.microbatch import join, split


def test_split_join_roundtrip_tensor_and_tuple():
    x = torch.arange(24.0).view(8, 3)
    parts = split(x, 4)
    assert [p.shape[0] for p in parts] == [2, 2, 2, 2]
    assert torch.equal(join(parts), x)
    pair = (x, x * 2)
    parts = split(pair, 2)
    assert isinstance(parts[0], tuple) and len(parts[0]) == 2
    assert torch.equal(join(parts)[1], x * 2)


@pytest.mark.parametrize(
    "M,msg",
    [
        (0, "M=0 is invalid"),
        (9, "M=9 exceeds the mini-batch of 8"),
        (3, "M=3 does not divide the mini-batch of 8"),
    ],
)
def test_bad_splits(M, msg):
    with pytest.raises(ValueError, match=msg):
        split(torch.zeros(8, 2), M)
