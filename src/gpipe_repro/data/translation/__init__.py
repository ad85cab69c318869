"""Real parallel text offline: corpora from Debian packages or a user's root, a shared SentencePiece
vocabulary, and token-count mini-batches for the translation model (paper §5, Table 5, Fig. 3)."""

from __future__ import annotations

from .batches import TranslationDataset, pad_pairs
from .corpus import CORPORA, SYNTHETIC, Corpus, load_corpus
from .vocab import BOS, EOS, PAD, UNK, Vocab, build_vocab

__all__ = ["BOS", "CORPORA", "Corpus", "EOS", "PAD", "SYNTHETIC", "TranslationDataset", "UNK", "Vocab",
           "build_vocab", "load_corpus", "pad_pairs", "translation"]


def translation(corpus: str | None = "es-en", root: str | None = None, src: str | None = None,
                tgt: str = "en", train_size: int | None = None, vocab_size: int = 8000,
                max_len: int = 128, bucket_width: int = 8, **_: object) -> TranslationDataset:
    """The dataset factory for ``data.name=translation`` (see ``data.DATASETS``)."""
    c = load_corpus(corpus, root=root, src=src, tgt=tgt, train_size=train_size)
    return TranslationDataset(c, build_vocab(c, vocab_size), max_len=max_len, bucket_width=bucket_width)
