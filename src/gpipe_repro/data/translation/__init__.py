"""Real parallel text offline: corpora from Debian packages or a user's root, a shared SentencePiece
vocabulary, and token-count mini-batches for the translation model (paper §5, Table 5, Fig. 3).

``data=translation``: its options are ``TranslationConfig``; ``train.batch_size`` counts target tokens
per mini-batch for this dataset (see ``batches``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...options import opt
from ..base import DataInfo
from .batches import TranslationDataset, pad_pairs
from .corpus import CORPORA, SYNTHETIC, Corpus, check_root, load_corpus
from .vocab import BOS, DEFAULT_SIZE, EOS, PAD, UNK, Vocab, build_vocab

__all__ = [
    "BOS",
    "CORPORA",
    "Corpus",
    "EOS",
    "PAD",
    "SYNTHETIC",
    "TranslationConfig",
    "TranslationDataset",
    "UNK",
    "Vocab",
    "build_vocab",
    "load_corpus",
    "pad_pairs",
    "translation",
]


@dataclass
class TranslationConfig:
    """Parallel text into English: ding de-en, Bible es-en, apertium-made (synthetic) sources, or
    your own files; a shared SentencePiece BPE vocabulary; batches of train.batch_size target tokens."""

    name: str = "translation"
    corpus: str = opt(
        "es-en",
        "the corpus (ignored when root is set); *-synthetic ones have machine-made sources",
        choices=[*CORPORA, *SYNTHETIC],
    )
    root: str | None = opt(
        None,
        "a folder with train/dev/test.<lang> files, one sentence per line; null = the named corpus",
    )
    src: str | None = opt(
        None, "source language of root's files; null = the one train.* besides tgt"
    )
    tgt: str = opt("en", "target language of root's files")
    train_size: int | None = opt(
        None,
        "keep the first N training pairs (a fixed random subset: low-resource runs); null = all",
        min=1,
    )
    vocab_size: int = opt(DEFAULT_SIZE, "SentencePiece pieces shared by both languages", min=8)
    max_len: int = opt(128, "longest training pair in tokens (longer ones are left out)", min=2)
    bucket_width: int = opt(8, "batch shapes are padded to multiples of this many tokens", min=1)

    def info(self) -> DataInfo:
        return DataInfo("pairs", (self.max_len,), self.vocab_size)

    def check(self) -> None:
        """At the edge, before any rank starts: a given root holds the files (nothing is read)."""
        if self.root is not None:
            check_root(Path(self.root).expanduser(), self.src, self.tgt)


def translation(c: TranslationConfig) -> TranslationDataset:
    """The dataset of ``data=translation``: the corpus fetched/parsed and its vocabulary trained on
    first use, both cached."""
    corpus = load_corpus(c.corpus, root=c.root, src=c.src, tgt=c.tgt, train_size=c.train_size)
    return TranslationDataset(
        corpus,
        build_vocab(corpus, c.vocab_size),
        max_len=c.max_len,
        bucket_width=c.bucket_width,
        classes=c.vocab_size,
    )
