"""Real parallel text offline: corpora from Debian packages or a user's root, many->English mixes of
them, a shared SentencePiece vocabulary, and token-count mini-batches for the translation model
(paper §5, Table 5, Fig. 3).

``data=translation``: its options are ``TranslationConfig``; ``train.batch_size`` counts target tokens
per mini-batch for this dataset (see ``batches``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import UserError
from ...options import opt
from ..base import DataInfo
from .batches import TranslationDataset, pad_pairs
from .corpus import CORPORA, SYNTHETIC, Corpus, Part, check_root, load_corpus
from .mix import is_root, load_mix, mix_corpora
from .vocab import BOS, DEFAULT_SIZE, EOS, PAD, UNK, Vocab, build_vocab

__all__ = [
    "BOS",
    "CORPORA",
    "Corpus",
    "EOS",
    "PAD",
    "Part",
    "SYNTHETIC",
    "TranslationConfig",
    "TranslationDataset",
    "UNK",
    "Vocab",
    "build_vocab",
    "load_corpus",
    "load_mix",
    "mix_corpora",
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
        "the corpus (ignored when root or corpora is set); *-synthetic ones have machine-made sources",
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
    corpora: list[str] | None = opt(
        None,
        "many->English: one model trained on these corpora at once (names as for corpus, or folders "
        "as for root), per-language test BLEU; null = the one corpus above",
    )
    train_sizes: list[int | None] | None = opt(
        None,
        "with corpora: keep the first N training pairs of each (null entries: all); null = all",
        allowed="null or one integer >= 1 (or null) per corpora entry",
    )
    train_offsets: list[int] | None = opt(
        None,
        "with corpora: skip the first N training pairs of each before train_sizes (disjoint "
        "slices of the same verses for the synthetic corpora); null = none skipped",
        allowed="null or one integer >= 0 per corpora entry",
    )
    temperature: float = opt(
        1.0,
        "with corpora: draw languages ~ pairs^(1/T) (1 = as the data come; 5 = the multilingual "
        "literature's up-sampling of low-resource languages)",
        min=1,
    )

    def info(self) -> DataInfo:
        return DataInfo("pairs", (self.max_len,), self.vocab_size)

    def check(self) -> None:
        """At the edge, before any rank starts: a given root holds the files (nothing is read)."""
        if self.corpora is not None:
            self._check_mix(self.corpora)
        elif self.train_sizes is not None or self.train_offsets is not None:
            field, value = (
                ("train_sizes", self.train_sizes)
                if self.train_sizes is not None
                else ("train_offsets", self.train_offsets)
            )
            raise UserError(
                f"data.{field}={value} needs data.corpora; allowed: null, "
                f"or data.train_size for the one corpus"
            )
        elif self.root is not None:
            check_root(Path(self.root).expanduser(), self.src, self.tgt)

    def _check_mix(self, corpora: list[str]) -> None:
        known = [*CORPORA, *SYNTHETIC]
        if not corpora:
            raise UserError("data.corpora=[] is empty; allowed: null or a list of corpora")
        if self.root is not None or self.train_size is not None:
            raise UserError(
                "data.corpora excludes data.root and data.train_size; allowed: folders inside "
                "data.corpora, sizes in data.train_sizes"
            )
        for entry in corpora:
            if is_root(entry):
                check_root(Path(entry).expanduser(), None, self.tgt)
            elif entry not in known:
                raise UserError(
                    f"data.corpora entry {entry!r} is unknown; allowed: {', '.join(known)}, "
                    f"or a folder of train/dev/test.<lang> files"
                )
        sizes = self.train_sizes
        if sizes is not None and (
            len(sizes) != len(corpora) or any(n is not None and n < 1 for n in sizes)
        ):
            raise UserError(
                f"data.train_sizes={list(sizes)} is invalid for {len(corpora)} corpora; allowed: "
                f"one integer >= 1 (or null) per data.corpora entry"
            )
        offsets = self.train_offsets
        if offsets is not None and (len(offsets) != len(corpora) or any(k < 0 for k in offsets)):
            raise UserError(
                f"data.train_offsets={list(offsets)} is invalid for {len(corpora)} corpora; "
                f"allowed: one integer >= 0 per data.corpora entry"
            )


def translation(c: TranslationConfig) -> TranslationDataset:
    """The dataset of ``data=translation``: the corpus (or the many->English mix of corpora) fetched
    and parsed and its vocabulary trained on first use, both cached."""
    if c.corpora is not None:
        corpus = load_mix(
            c.corpora, c.train_sizes, c.temperature, tgt=c.tgt, train_offsets=c.train_offsets
        )
    else:
        corpus = load_corpus(c.corpus, root=c.root, src=c.src, tgt=c.tgt, train_size=c.train_size)
    return TranslationDataset(
        corpus,
        build_vocab(corpus, c.vocab_size),
        max_len=c.max_len,
        bucket_width=c.bucket_width,
        classes=c.vocab_size,
    )
