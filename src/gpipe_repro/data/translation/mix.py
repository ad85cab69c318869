"""Many->English: several corpora mixed into one training stream, with per-language dev and test.

The paper trains one T(L, H, A) on all its language pairs into English at once (§5, Fig. 3), and
reports BLEU per language, grouped by how much data each has. ``data.corpora`` does the same here:
the training pairs of every corpus go into one pool that the token-count batches (``batches``) draw
from, so a mini-batch mixes languages; dev and test are the corpora's own splits laid end to end, and
each language remembers its rows (``Part``), so evaluation scores every language on its own test set.

Sampling. A low-resource language would be a few percent of a proportional stream. As in the
multilingual setup the paper's data come from (Arivazhagan et al. 2019, "Massively Multilingual Neural
Machine Translation in the Wild"), languages are drawn with probability ~ n_l^(1/T) for a temperature
T >= 1 (T = 1: proportional to the data; large T: uniform). Here that is done with whole copies, so a
step's batch still depends only on (seed, step): language l's training pairs are repeated
``round((n_max / n_l) ** (1 - 1/T))`` times (at least once), which makes its share of the pool
proportional to n_l^(1/T) up to rounding.

Resource groups: a language is ``low`` when it has fewer than ``LOW_FRACTION`` of the largest
language's distinct training pairs in the mix, else ``high``. A synthetic source (apertium) keeps its
label on its ``Part`` and in every result that names the language. No language tag is added to the
source: every target is English and the source languages are told apart by their own words.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import UserError
from .corpus import Corpus, Part, load_corpus

__all__ = ["LOW_FRACTION", "copies_for", "resource_of", "mix_corpora", "load_mix", "is_root"]

LOW_FRACTION = 0.25


def copies_for(sizes: Sequence[int], temperature: float) -> list[int]:
    """Whole copies of each language's training pairs for temperature sampling (module doc)."""
    if temperature < 1:
        raise UserError(f"temperature={temperature} is invalid; allowed: a number >= 1")
    if not sizes or min(sizes) < 1:
        raise UserError(f"every corpus of a mix needs training pairs; got sizes {list(sizes)}")
    largest = max(sizes)
    return [max(1, round((largest / n) ** (1 - 1 / temperature))) for n in sizes]


def resource_of(n: int, largest: int) -> str:
    """``low`` below ``LOW_FRACTION`` of the largest language's training pairs, else ``high``."""
    return "low" if n < LOW_FRACTION * largest else "high"


def mix_corpora(corpora: Sequence[Corpus], temperature: float = 1.0) -> Corpus:
    """One corpus holding every language of ``corpora`` (all into the same target language)."""
    if not corpora:
        raise UserError("corpora=[] is empty; allowed: a list of one or more corpora")
    targets = sorted({c.tgt for c in corpora})
    if len(targets) != 1:
        raise UserError(
            f"corpora translate into {', '.join(targets)}; a mix needs one target language"
        )
    srcs = [c.src for c in corpora]
    twice = sorted({s for s in srcs if srcs.count(s) > 1})
    if twice:
        names = ", ".join(c.name for c in corpora)
        raise UserError(
            f"corpora=[{names}] has source language {', '.join(twice)} more than once; allowed: "
            f"one corpus per source language (results are reported per language)"
        )
    sizes = [len(c.train) for c in corpora]
    copies = copies_for(sizes, temperature)
    train: list[Any] = []
    dev: list[Any] = []
    test: list[Any] = []
    parts: list[Any] = []
    for c, k in zip(corpora, copies):
        span = {
            s: (len(out), len(out) + len(c.split(s))) for s, out in (("dev", dev), ("test", test))
        }
        train += c.train * k
        dev += c.dev
        test += c.test
        parts.append(
            Part(
                c.name,
                c.src,
                c.synthetic,
                c.note,
                len(c.train),
                k,
                resource_of(len(c.train), max(sizes)),
                span["dev"],
                span["test"],
            )
        )
    label = "+".join(c.name for c in corpora)
    digest = hashlib.sha1(f"{label}|{sizes}|{copies}".encode()).hexdigest()[:12]
    notes = "; ".join(f"{c.src}: {c.note}" for c in corpora)
    return Corpus(
        label,
        "+".join(srcs),
        targets[0],
        train,
        dev,
        test,
        synthetic=any(c.synthetic for c in corpora),
        note=f"many->{targets[0]} mix, temperature {temperature:g} ({notes})",
        key=f"mix-{digest}",
        parts=tuple(parts),
    )


def is_root(entry: str) -> bool:
    """Whether a ``corpora`` entry names a folder (a user's corpus) rather than a named corpus."""
    return "/" in entry or entry.startswith((".", "~")) or Path(entry).expanduser().is_dir()


def load_mix(
    entries: Sequence[str],
    train_sizes: Sequence[int | None] | None = None,
    temperature: float = 1.0,
    tgt: str = "en",
    train_offsets: Sequence[int] | None = None,
) -> Corpus:
    """The corpora named by ``entries`` (corpus names, or folders as for ``root``), each cut to its
    ``train_sizes`` entry (null: all) after skipping its ``train_offsets`` entry (default 0), mixed
    with ``mix_corpora``."""
    sizes = list(train_sizes) if train_sizes is not None else [None] * len(entries)
    offsets = list(train_offsets) if train_offsets is not None else [0] * len(entries)
    for name, given in (("train_sizes", sizes), ("train_offsets", offsets)):
        if len(given) != len(entries):
            raise UserError(
                f"{name}={given} has {len(given)} entries but corpora has {len(entries)}; "
                f"allowed: one entry per corpus"
            )
    corpora = [
        load_corpus(root=e, tgt=tgt, train_size=n, train_offset=k)
        if is_root(e)
        else load_corpus(e, train_size=n, train_offset=k)
        for e, n, k in zip(entries, sizes, offsets)
    ]
    return mix_corpora(corpora, temperature)
