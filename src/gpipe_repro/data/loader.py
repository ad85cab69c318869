"""Image datasets as a resumable stream of epochs through torch's DataLoader, augmented per sample.

Training step ``s`` with mini-batch ``N`` reads batch ``s mod E`` of epoch ``s // E`` (``E`` = steps per
epoch = train size // N, the last partial batch dropped). Each epoch is a permutation of the training
split seeded by ``(seed, epoch)``; each sample is augmented with draws seeded by ``(seed, epoch,
index)``. A batch is therefore a pure function of ``(seed, step)``: starting the stream at step ``s``
(a resume) yields exactly what an uninterrupted stream yields from ``s`` on, with 0 or many workers.

The batch sampler hands the DataLoader keys ``(seed, epoch, index)`` rather than bare indices, so the
workers need no epoch state and no RNG of their own. The last pipeline stage only needs labels:
``need_inputs=False`` reads them from memory without decoding or augmenting an image.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler
from torch.utils.data import Dataset as TorchDataset

from ..errors import UserError
from .augment import apply_seeded, channel_stats, derive_seed, eval_transform, train_transform
from .base import DataInfo, Dataset
from .subset import check_classes, check_per_class, select

__all__ = [
    "EpochBatchSampler",
    "ImageDataset",
    "Split",
    "check_options",
    "epoch_permutation",
    "from_tensors",
]

Key = tuple[int, int, int]  # (seed, epoch, index into the split)


@dataclass(frozen=True)
class Split:
    """Images ``source[indices[j]]`` with labels ``labels[j]``; ``source[i]`` is a uint8 (C, H, W)
    tensor or a PIL image."""

    source: Any
    indices: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.indices.numel())


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order of the ``n`` training samples in ``epoch``: a permutation seeded by ``(seed, epoch)``."""
    g = torch.Generator().manual_seed(derive_seed(0x5045524D, seed, epoch))  # "PERM"
    return torch.randperm(n, generator=g)


class EpochBatchSampler(Sampler[list[Key]]):
    """Endless keys for steps ``start_step``, ``start_step + 1``, ... (``drop_last`` epochs)."""

    def __init__(self, n: int, batch_size: int, seed: int, start_step: int = 0) -> None:
        if batch_size < 1 or batch_size > n:
            raise UserError(
                f"batch_size={batch_size} must be between 1 and the {n} training images"
            )
        self.n, self.batch_size, self.seed, self.start_step = n, batch_size, seed, start_step
        self.steps_per_epoch = n // batch_size

    def keys(self, step: int, perm: torch.Tensor | None = None) -> list[Key]:
        epoch, b = divmod(step, self.steps_per_epoch)
        perm = epoch_permutation(self.n, self.seed, epoch) if perm is None else perm
        return [
            (self.seed, epoch, int(j))
            for j in perm[b * self.batch_size : (b + 1) * self.batch_size]
        ]

    def __iter__(self) -> Iterator[list[Key]]:
        step, cached = self.start_step, (-1, torch.empty(0))
        while True:
            epoch = step // self.steps_per_epoch
            if cached[0] != epoch:
                cached = (epoch, epoch_permutation(self.n, self.seed, epoch))
            yield self.keys(step, cached[1])
            step += 1


class _Samples(TorchDataset):
    """``key -> (image, label)``: a training key ``(seed, epoch, j)`` is augmented, an index ``j`` is not."""

    def __init__(self, split: Split, train_tf: Any, eval_tf: Any) -> None:
        self.split, self.train_tf, self.eval_tf = split, train_tf, eval_tf

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, key: Key | int) -> tuple[torch.Tensor, int]:
        if isinstance(key, tuple):
            seed, epoch, j = key
            image = self.split.source[int(self.split.indices[j])]
            x = apply_seeded(self.train_tf, image, derive_seed(seed, epoch, j))
        else:
            j = key
            x = self.eval_tf(self.split.source[int(self.split.indices[j])]).as_subclass(
                torch.Tensor
            )
        return x, int(self.split.labels[j])


def check_options(
    image_size: int, flip: bool, cutout: int, workers: int, worker_timeout_s: float
) -> None:
    """One-line errors for the loader's options, named as the config exposes them."""
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise UserError(f"data.image_size={image_size!r} must be a positive integer (pixels)")
    if not isinstance(flip, bool):
        raise UserError(f"data.flip={flip!r} must be true or false")
    if isinstance(cutout, bool) or not isinstance(cutout, int) or not 0 <= cutout <= image_size:
        raise UserError(
            f"data.cutout={cutout!r} must be an integer from 0 (off) to "
            f"data.image_size={image_size} (the square's side in pixels)"
        )
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise UserError(
            f"data.workers={workers!r} must be an integer >= 0 (0: load in the training process)"
        )
    if not isinstance(worker_timeout_s, (int, float)) or worker_timeout_s <= 0:
        raise UserError(
            f"data.worker_timeout_s={worker_timeout_s!r} must be a positive number of seconds"
        )


class ImageDataset(Dataset):
    """A train and a test :class:`Split` with the transfer recipe's transforms (see ``augment``)."""

    def __init__(
        self,
        name: str,
        train: Split,
        test: Split,
        *,
        classes: int,
        channels: int,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        flip: bool,
        cutout: int,
        native: tuple[int, int] | None = None,
        workers: int = 0,
        worker_timeout_s: float = 120.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        check_options(image_size, flip, cutout, workers, worker_timeout_s)
        self.name, self.train, self.test = name, train, test
        self.info = DataInfo("image", (channels, image_size, image_size), classes)
        self.flip, self.cutout = flip, cutout
        self.workers, self.worker_timeout_s = workers, worker_timeout_s
        tr = train_transform(
            image_size, mean=mean, std=std, flip=flip, cutout=cutout, native=native
        )
        ev = eval_transform(image_size, mean=mean, std=std, native=native)
        self.train_samples, self.test_samples = _Samples(train, tr, ev), _Samples(test, tr, ev)
        self._eval_loaders: dict[int, DataLoader] = {}
        self.extra = extra or {}

    def steps_per_epoch(self, batch_size: int) -> int:
        return len(self.train) // batch_size

    def _loader(self, samples: _Samples, batch_sampler: Any) -> DataLoader:
        w = self.workers
        # Its own generator: the DataLoader draws a base seed per iterator, which would otherwise
        # advance the training process's global RNG. Our samples never use it (seeded per key).
        return DataLoader(
            samples,
            batch_sampler=batch_sampler,
            num_workers=w,
            persistent_workers=w > 0,
            timeout=self.worker_timeout_s if w > 0 else 0,
            prefetch_factor=2 if w else None,
            generator=torch.Generator().manual_seed(0),
        )

    def batches(
        self,
        start_step: int,
        batch_size: int,
        seed: int,
        *,
        multiple_of: int = 1,
        need_inputs: bool = True,
    ) -> Iterator[tuple[Any, Any]]:
        if start_step < 0:
            raise ValueError(f"start_step={start_step} must be >= 0")
        if multiple_of < 1 or batch_size % multiple_of:
            raise UserError(
                f"batch_size={batch_size} is not a multiple of {multiple_of} (micro-batches)"
            )
        sampler = EpochBatchSampler(len(self.train), batch_size, seed, start_step)
        if not need_inputs:
            labels = self.train.labels
            return ((None, labels[torch.tensor([k[2] for k in keys])]) for keys in sampler)
        return iter(self._loader(self.train_samples, sampler))

    def train_batch(
        self, step: int, batch_size: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of ``step``, computed in this process (the stream's batch, without workers)."""
        keys = EpochBatchSampler(len(self.train), batch_size, seed).keys(step)
        xs, ys = zip(*(self.train_samples[k] for k in keys))
        return torch.stack(xs), torch.tensor(ys, dtype=torch.long)

    def eval_batches(self, batch_size: int = 256) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The test split in order, unaugmented; the DataLoader (and its workers) is kept for reuse."""
        if batch_size not in self._eval_loaders:
            sampler = BatchSampler(
                SequentialSampler(range(len(self.test))), batch_size, drop_last=False
            )
            self._eval_loaders[batch_size] = self._loader(self.test_samples, sampler)
        return iter(self._eval_loaders[batch_size])

    def eval_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*self.eval_batches(), strict=True)
        return torch.cat(xs), torch.cat(ys)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "train_size": len(self.train),
            "eval_size": len(self.test),
            "flip": self.flip,
            "cutout": self.cutout,
            "workers": self.workers,
            **self.extra,
        }


def from_tensors(
    name: str,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    num_classes: int,
    *,
    classes: list[int] | None,
    per_class: int | None,
    subset_seed: int,
    image_size: int,
    flip: bool,
    cutout: int,
    workers: int,
    worker_timeout_s: float,
    extra: dict[str, Any] | None = None,
) -> ImageDataset:
    """An :class:`ImageDataset` from uint8 images ``(N, C, H, W)`` and labels held in memory.

    ``classes``/``per_class`` select and relabel (see ``subset``); the normalisation uses the mean and
    standard deviation of the *whole* training split, so a pre-training subset and a fine-tuning subset
    of the same set see the same input scale.
    """
    (x_tr, y_tr), (x_te, y_te) = train, test
    chosen = check_classes(classes, num_classes)
    per = check_per_class(per_class)
    if isinstance(subset_seed, bool) or not isinstance(subset_seed, int):
        raise UserError(f"data.subset_seed={subset_seed!r} must be an integer")
    mean, std = channel_stats(x_tr)
    tr, te = select(y_tr, chosen, per, subset_seed), select(y_te, chosen)
    info = {
        "classes_selected": chosen if classes is not None else None,
        "per_class": per,
        "subset_seed": subset_seed,
        **(extra or {}),
    }
    return ImageDataset(
        name,
        Split(x_tr, tr.indices, tr.labels),
        Split(x_te, te.indices, te.labels),
        classes=len(chosen),
        channels=int(x_tr.shape[1]),
        image_size=image_size,
        mean=mean,
        std=std,
        flip=flip,
        cutout=cutout,
        native=(int(x_tr.shape[2]), int(x_tr.shape[3])),
        workers=workers,
        worker_timeout_s=worker_timeout_s,
        extra=info,
    )
