"""Translation mini-batches by token count, from length buckets: a resumable ``Dataset``.

The paper counts translation batches in tokens (Table 5: 260K, 1M, 4M). Here ``batch_size`` is the
number of (padded) target tokens per mini-batch. Each training pair goes to the bucket of its
length, ``L = max(source, target) tokens`` rounded up to a multiple of ``bucket_width``, and a
bucket-``L`` mini-batch holds ``n = batch_size // L`` pairs (rounded down to a multiple of
``multiple_of``, at least ``multiple_of``) padded to ``(n, L)``: a fixed set of shapes, one per
bucket, so little is padding. Buckets too small to fill one mini-batch are merged into the next
longer one; pairs longer than ``max_len`` are left out of training.

Order: epoch e shuffles every bucket and the list of its mini-batches with a generator seeded by
(seed, e); step s is mini-batch s mod B of epoch s div B (B mini-batches per epoch). So a step's batch
depends only on (seed, step): any process computes it alone, and a run resumes at any step.

Inputs ``(src, tgt_in)``: the source followed by EOS, and BOS followed by the target; targets
``(tgt, tokens)``: the target followed by EOS, and the mini-batch's number of target tokens repeated on
every row (for ``models.transformer.token_loss``); padding is 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ...errors import UserError
from ..base import DataInfo, Dataset
from .corpus import SPLITS, Corpus
from .vocab import BOS, EOS, PAD, Vocab

__all__ = ["TranslationDataset", "pad_pairs"]


def pad_pairs(
    src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], length: int | None = None
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``((src, tgt_in), (tgt, tokens))`` for token-id lists (no specials), padded to ``length``
    (default: the longest) with PAD."""
    rows_s = [[*s, EOS] for s in src]
    rows_t = [[BOS, *t, EOS] for t in tgt]
    L = length or max(max(map(len, rows_s)), max(map(len, rows_t)) - 1)
    s_out = torch.full((len(src), L), PAD, dtype=torch.long)
    t_full = torch.full((len(src), L + 1), PAD, dtype=torch.long)
    for i, (s, t) in enumerate(zip(rows_s, rows_t)):
        s_out[i, : len(s)] = torch.tensor(s[:L])
        t_full[i, : len(t)] = torch.tensor(t[: L + 1])
    tgt_out = t_full[:, 1:]
    count = int((tgt_out != PAD).sum())
    return (s_out, t_full[:, :-1]), (tgt_out, torch.full((len(src),), count, dtype=torch.long))


class TranslationDataset(Dataset):
    """A corpus encoded with a vocabulary, served as token-count mini-batches (see module doc)."""

    def __init__(
        self,
        corpus: Corpus,
        vocab: Vocab,
        max_len: int = 128,
        bucket_width: int = 8,
        classes: int | None = None,
    ) -> None:
        """``classes``: the model's vocabulary size if larger than the trained one (a tiny corpus
        can yield fewer pieces than asked for; the config's ``info()`` announced the asked size)."""
        if max_len < 2 or bucket_width < 1:
            raise UserError(
                f"max_len={max_len}, bucket_width={bucket_width} are invalid; allowed: "
                f"max_len >= 2, bucket_width >= 1"
            )
        self.corpus, self.vocab = corpus, vocab
        self.name = corpus.name
        self.max_len, self.width = max_len, bucket_width
        self.info = DataInfo("pairs", (max_len,), max(vocab.size, classes or 0))
        self._ids = {
            s: (
                vocab.encode([p[0] for p in corpus.split(s)]),
                vocab.encode([p[1] for p in corpus.split(s)]),
            )
            for s in SPLITS
        }
        src, tgt = self._ids["train"]
        self._lengths = [max(len(a), len(b)) + 1 for a, b in zip(src, tgt)]  # + EOS (or BOS)
        self.dropped = sum(n > max_len for n in self._lengths)
        if self.dropped == len(self._lengths):
            raise UserError(f"max_len={max_len} leaves no training pair of {corpus.name}; raise it")
        self._plans: dict[tuple[int, int], list[tuple[int, int, list[int]]]] = {}

    # ------------------------------------------------------------------ buckets and epochs
    def buckets(self, batch_size: int, multiple_of: int = 1) -> list[tuple[int, int, list[int]]]:
        """``(L, n, pair indices)`` per bucket, small buckets merged into the next longer one."""
        if batch_size < 1 or multiple_of < 1:
            raise UserError(
                f"batch_size={batch_size}, multiple_of={multiple_of} are invalid; "
                f"allowed: integers >= 1 (batch_size counts target tokens)"
            )
        key = (batch_size, multiple_of)
        if key not in self._plans:
            by_len: dict[int, list[int]] = {}
            for i, n in enumerate(self._lengths):
                if n <= self.max_len:
                    L = min(-(-n // self.width) * self.width, self.max_len)
                    by_len.setdefault(L, []).append(i)
            plan: list[tuple[int, int, list[int]]] = []
            carry: list[int] = []
            for L in sorted(by_len):
                members = carry + by_len[L]
                n = max(multiple_of, batch_size // L // multiple_of * multiple_of)
                if len(members) < n and L != max(by_len):
                    carry = members
                    continue
                plan.append((L, n, members))
                carry = []
            self._plans[key] = plan
        return self._plans[key]

    def batches_per_epoch(self, batch_size: int, multiple_of: int = 1) -> int:
        return sum(max(1, len(m) // n) for _, n, m in self.buckets(batch_size, multiple_of))

    def _epoch(
        self, epoch: int, batch_size: int, seed: int, multiple_of: int
    ) -> list[tuple[int, list[int]]]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * epoch + 1)
        out = []
        for L, n, members in self.buckets(batch_size, multiple_of):
            order = [members[i] for i in torch.randperm(len(members), generator=g).tolist()]
            if len(order) < n:  # the longest bucket, smaller than one mini-batch: repeat pairs
                order = (order * (n // len(order) + 1))[:n]
            out += [(L, order[k * n : (k + 1) * n]) for k in range(len(order) // n)]
        return [out[i] for i in torch.randperm(len(out), generator=g).tolist()]

    # ------------------------------------------------------------------ the Dataset interface
    def batches(
        self,
        start_step: int,
        batch_size: int,
        seed: int,
        *,
        multiple_of: int = 1,
        need_inputs: bool = True,
    ) -> Iterator[tuple[Any, Any]]:
        per_epoch = self.batches_per_epoch(batch_size, multiple_of)
        step, epoch, plan = start_step, -1, []
        src, tgt = self._ids["train"]
        while True:
            if step // per_epoch != epoch:
                epoch = step // per_epoch
                plan = self._epoch(epoch, batch_size, seed, multiple_of)
            L, rows = plan[step % per_epoch]
            inputs, targets = pad_pairs([src[i] for i in rows], [tgt[i] for i in rows], L)
            yield (inputs if need_inputs else None), targets
            step += 1

    def train_batch(self, step: int, batch_size: int, seed: int) -> tuple[Any, Any]:
        return next(self.batches(step, batch_size, seed))

    def eval_pairs(
        self, split: str = "dev", batch_tokens: int = 4096, rows: Sequence[int] | None = None
    ) -> Iterator[tuple[list[int], tuple[Any, Any]]]:
        """``(pair indices, (inputs, targets))`` over a whole split (or its ``rows``: one language
        of a mix, ``Part.rows``), sorted by length and padded per batch (no length limit): for
        dev/test NLL. Indices refer to ``corpus.split(split)``."""
        src, tgt = self._split_ids(split)
        pool = range(len(src)) if rows is None else rows
        order = sorted(pool, key=lambda i: (max(len(src[i]), len(tgt[i])), i))
        start = 0
        while start < len(order):
            L = max(len(src[order[start]]), len(tgt[order[start]])) + 1
            end = start + 1
            while end < len(order):
                L_next = max(L, max(len(src[order[end]]), len(tgt[order[end]])) + 1)
                if L_next * (end - start + 1) > batch_tokens:
                    break
                L, end = L_next, end + 1
            rows = order[start:end]
            yield rows, pad_pairs([src[i] for i in rows], [tgt[i] for i in rows])
            start = end

    def _split_ids(self, split: str) -> tuple[list[list[int]], list[list[int]]]:
        self.corpus.split(split)  # one-line error for an unknown split
        return self._ids[split]

    def source_ids(self, split: str = "dev") -> list[list[int]]:
        """Token ids (no specials) of a split's source sentences, in corpus order."""
        return self._split_ids(split)[0]

    def references(self, split: str = "dev") -> list[str]:
        return [t for _, t in self.corpus.split(split)]

    def describe(self) -> dict:
        return {
            **super().describe(),
            **self.corpus.describe(),
            "vocab_size": self.vocab.size,
            "max_len": self.max_len,
            "bucket_width": self.width,
            "train_dropped_long": self.dropped,
        }
