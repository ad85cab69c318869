"""Class subsets with relabelling and a fixed number of labelled images per class (transfer targets).

A same-domain transfer experiment pre-trains on some classes and fine-tunes on the others with few
labels: e.g. Fashion-MNIST classes 0-4 for pre-training, then classes 5-9 relabelled 0-4 with 20 or
100 training images per class. ``classes`` lists the original labels in the order of their new labels;
``per_class`` picks that many training images of each class, a fixed subset drawn with ``subset_seed``
(independent of the run's seed, so every fine-tuning run sees the same labelled images). The test
split keeps every official test image of the chosen classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..errors import UserError

__all__ = ["Selection", "check_classes", "select"]


@dataclass(frozen=True)
class Selection:
    indices: torch.Tensor  # positions in the full split, ascending
    labels: torch.Tensor  # the new labels (0 .. len(classes)-1), aligned with ``indices``


def check_classes(classes: Sequence[int] | None, num_classes: int) -> list[int]:
    """``classes`` as a list of distinct labels in ``[0, num_classes)``; ``None`` means all of them."""
    if classes is None:
        return list(range(num_classes))
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence):
        raise UserError(f"data.classes={classes!r} must be a list of class labels or null")
    out: list[int] = []
    for c in classes:
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < num_classes:
            raise UserError(
                f"data.classes={list(classes)!r}: {c!r} is not a class; allowed: "
                f"integers 0..{num_classes - 1}"
            )
        if c in out:
            raise UserError(f"data.classes={list(classes)!r} lists class {c} twice")
        out.append(c)
    if not out:
        raise UserError("data.classes=[] is empty; list at least one class or use null for all")
    return out


def check_per_class(per_class: int | None) -> int | None:
    if per_class is None:
        return None
    if isinstance(per_class, bool) or not isinstance(per_class, int) or per_class < 1:
        raise UserError(
            f"data.per_class={per_class!r} must be a positive integer or null (all images)"
        )
    return per_class


def select(
    labels: torch.Tensor, classes: list[int], per_class: int | None = None, subset_seed: int = 0
) -> Selection:
    """The images of ``classes`` (relabelled by position in ``classes``), ``per_class`` of each if set."""
    labels = labels.long()
    new = torch.full((int(labels.max()) + 1 if labels.numel() else 1,), -1, dtype=torch.long)
    keep: list[torch.Tensor] = []
    for i, c in enumerate(classes):
        if c < new.numel():
            new[c] = i
        idx = torch.nonzero(labels == c).flatten()
        if per_class is not None:
            if per_class > idx.numel():
                raise UserError(
                    f"data.per_class={per_class} exceeds the {idx.numel()} training images "
                    f"of class {c}"
                )
            g = torch.Generator().manual_seed(subset_seed * 1_000_003 + c)
            idx = idx[torch.randperm(idx.numel(), generator=g)[:per_class]]
        keep.append(idx)
    indices = torch.sort(torch.cat(keep)).values if keep else torch.empty(0, dtype=torch.long)
    return Selection(indices, new[labels[indices]])
