"""The resumable epoch stream: resume equality, same batches with 0 and 2 workers, epochs are
permutations, labels without images for the last stage, unaugmented evaluation."""

from __future__ import annotations

from itertools import islice

import pytest
import torch

from gpipe_repro.data.augment import eval_transform
from gpipe_repro.data.loader import EpochBatchSampler, ImageDataset, epoch_permutation, from_tensors
from gpipe_repro.errors import UserError

N_TRAIN, N_TEST, SIZE = 50, 12, 12


def _tiny(workers: int = 0, **kw) -> ImageDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (N_TRAIN + N_TEST, 1, SIZE, SIZE), generator=g, dtype=torch.uint8)
    y = torch.arange(N_TRAIN + N_TEST) % 5
    opts = {
        "classes": None,
        "per_class": None,
        "subset_seed": 0,
        "image_size": SIZE,
        "flip": True,
        "cutout": 4,
        "workers": workers,
        "worker_timeout_s": 20.0,
        **kw,
    }
    return from_tensors("tiny", (x[:N_TRAIN], y[:N_TRAIN]), (x[N_TRAIN:], y[N_TRAIN:]), 5, **opts)


def _take(ds: ImageDataset, start: int, n: int, **kw) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(islice(ds.batches(start, 16, seed=3, **kw), n))


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b)
    )


def test_resume_yields_what_the_uninterrupted_stream_yields():
    ds = _tiny()
    full = _take(ds, 0, 8)  # 3 steps per epoch (50 // 16): crosses two epoch boundaries
    assert _same(_take(ds, 5, 3), full[5:])
    assert _same(_take(ds, 2, 4), full[2:6])
    assert all(torch.equal(ds.train_batch(s, 16, 3)[0], full[s][0]) for s in (0, 4, 7))


def test_two_workers_give_the_same_batches_as_none():
    ref = _take(_tiny(workers=0), 1, 5)
    assert _same(_take(_tiny(workers=2), 1, 5), ref)


def test_epochs_are_permutations_with_drop_last_and_fresh_augmentation():
    s = EpochBatchSampler(N_TRAIN, 16, seed=3)
    keys = list(islice(iter(s), 6))
    for e in (0, 1):
        idx = [k[2] for batch in keys[3 * e : 3 * e + 3] for k in batch]
        assert len(idx) == 48 and len(set(idx)) == 48  # each sample at most once; 2 dropped
        assert all(k[:2] == (3, e) for batch in keys[3 * e : 3 * e + 3] for k in batch)
        assert idx == epoch_permutation(N_TRAIN, 3, e)[:48].tolist()
    assert not torch.equal(epoch_permutation(N_TRAIN, 3, 0), epoch_permutation(N_TRAIN, 3, 1))
    assert not torch.equal(epoch_permutation(N_TRAIN, 3, 0), epoch_permutation(N_TRAIN, 4, 0))
    ds = _tiny()
    views = [ds.train_samples[(3, e, 7)][0] for e in range(4)]  # one sample, four epochs
    assert any(not torch.equal(views[0], v) for v in views[1:])


def test_labels_only_stream_matches_and_skips_images():
    ds = _tiny()
    full = _take(ds, 2, 4)
    lean = _take(ds, 2, 4, need_inputs=False)
    assert all(x is None for x, _ in lean)
    assert all(torch.equal(y, yf) for (_, y), (_, yf) in zip(lean, full))

    class Boom:
        def __getitem__(self, i: int) -> torch.Tensor:
            raise AssertionError("an image was read")

    object.__setattr__(ds.train, "source", Boom())
    assert len(_take(ds, 0, 5, need_inputs=False)) == 5


def test_global_rng_untouched_by_loading():
    ds = _tiny()
    state = torch.get_rng_state()
    _take(ds, 0, 3)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("workers", [0, 2])
def test_evaluation_is_unaugmented_and_repeatable(workers: int):
    ds = _tiny(workers=workers)
    x, y = ds.eval_set()
    ev = eval_transform(
        SIZE,
        mean=ds.train_samples.eval_tf.transforms[-1].mean,
        std=ds.train_samples.eval_tf.transforms[-1].std,
        native=(SIZE, SIZE),
    )
    expected = torch.stack([ev(ds.test.source[int(i)]) for i in ds.test.indices])
    assert torch.equal(x, expected) and torch.equal(y, ds.test.labels)
    x2, _ = ds.eval_set()
    assert torch.equal(x, x2)
    assert [b[0].shape[0] for b in ds.eval_batches(5)] == [5, 5, 2]


def test_errors_name_the_argument():
    ds = _tiny()
    with pytest.raises(UserError, match=r"batch_size=18 is not a multiple of 4"):
        next(ds.batches(0, 18, 0, multiple_of=4))
    with pytest.raises(
        UserError, match=r"batch_size=60 must be between 1 and the 50 training images"
    ):
        next(ds.batches(0, 60, 0))
    for kw, field in (
        ({"cutout": 13}, "data.cutout=13"),
        ({"workers": -1}, "data.workers=-1"),
        ({"image_size": 0}, "data.image_size=0"),
        ({"flip": "yes"}, "data.flip='yes'"),
    ):
        with pytest.raises(UserError, match=field):
            _tiny(**kw)
