"""A shared source/target subword vocabulary: SentencePiece BPE trained on the training split.

The paper uses a 64k wordpiece vocabulary shared by all languages (§5). Of SentencePiece's models,
BPE is the closest to wordpiece (both grow the vocabulary by greedy merges; wordpiece scores a merge
by likelihood gain) and it trains faster than the unigram model, which re-estimates every candidate
piece by EM in each round; its output is deterministic. Text is
detokenised losslessly (``decode``), so BLEU is computed on plain text.

Special ids: ``PAD`` = 0 (the model's padding id), ``UNK`` = 1, ``BOS`` = 2, ``EOS`` = 3. The model is
cached next to the corpus splits, keyed by corpus, size and a hash of the training text, so a
different subset or a changed user corpus never reuses a stale vocabulary.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...errors import UserError
from .corpus import Corpus
from .fetch import translation_cache

__all__ = ["PAD", "UNK", "BOS", "EOS", "Vocab", "build_vocab", "DEFAULT_SIZE"]


def _spm() -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise UserError("translation data need sentencepiece: pip install sentencepiece") from None
    return sentencepiece


PAD, UNK, BOS, EOS = 0, 1, 2, 3
DEFAULT_SIZE = 8000


class Vocab:
    """Encode text to ids and back with a trained SentencePiece model."""

    def __init__(self, model: bytes, path: Path | None = None) -> None:
        self.sp = _spm().SentencePieceProcessor(model_proto=model)
        self.path = path
        assert (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) == (
            PAD,
            UNK,
            BOS,
            EOS,
        )

    @property
    def size(self) -> int:
        return int(self.sp.get_piece_size())

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts))

    def decode(self, ids: Iterable[Sequence[int]]) -> list[str]:
        """Plain text; stops at EOS and skips PAD/BOS."""
        out = []
        for seq in ids:
            seq = list(seq)
            if EOS in seq:
                seq = seq[: seq.index(EOS)]
            out.append(self.sp.decode([i for i in seq if i not in (PAD, BOS)]))
        return out


def _train(lines: Iterable[str], size: int) -> bytes:
    model = io.BytesIO()
    _spm().SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=size,
        model_type="bpe",
        character_coverage=1.0,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        hard_vocab_limit=False,  # a tiny corpus gets fewer pieces instead of an error
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def build_vocab(corpus: Corpus, size: int = DEFAULT_SIZE) -> Vocab:
    """The vocabulary of ``corpus``'s training split (both sides), trained once and cached."""
    if size < 8:
        raise UserError(f"vocab_size={size} is invalid; allowed: an integer >= 8")
    lines = [s for pair in corpus.train for s in pair]
    digest = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:12]
    path = translation_cache(corpus.key or corpus.name) / f"spm-bpe-{size}-{digest}.model"
    if path.exists():
        return Vocab(path.read_bytes(), path)
    model = _train(lines, size)
    # one temporary file per process: the first and last stages of a K >= 2 run may build
    # the same cache file at once; each replace is atomic and they write the same bytes
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(model)
    tmp.replace(path)
    return Vocab(model, path)
