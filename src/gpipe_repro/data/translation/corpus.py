"""Parallel corpora by name, with fixed train/dev/test splits cached as TSV.

- ``de-en``: German->English example sentences of the ding dictionary (``trans-de-en``), ~18,300.
- ``es-en``: Spanish->English Bible verses, Reina-Valera 1909 / World English Bible, ~31,000.
- ``ca-en-synthetic``, ``gl-en-synthetic``, ``es-en-synthetic``: **synthetic** sources, apertium's
  Catalan, Galician or Spanish translation of the ``es-en`` English side (same verses in every
  split, so test sets stay parallel across languages); labelled synthetic in name and description.
- ``root=DIR``: a user's corpus, plain UTF-8 text, one sentence per line, line i of
  ``train.<src>`` translating line i of ``train.<tgt>``; likewise ``dev.*`` and ``test.*``.

Splits are drawn once with a fixed seed (never the run's), after dropping duplicate pairs: dev and
test hold ``EVAL_SIZE`` pairs each, train the rest. ``train_size`` keeps the first pairs of the
(already shuffled) training split: a random low-resource subset, the same for every run;
``train_offset`` skips that many pairs first, so corpora made from the same verses (the synthetic
ones) can take disjoint slices of them.
Files: ``$GPIPE_DATA_CACHE/translation/<name>/{train,dev,test}.tsv`` (``source<TAB>target``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...errors import UserError
from . import apertium, bible, ding
from .fetch import _fetch, translation_cache

__all__ = [
    "CORPORA",
    "Corpus",
    "Pair",
    "Part",
    "check_root",
    "load_corpus",
    "split_pairs",
    "read_root",
]

Pair = tuple[str, str]
SPLITS = ("train", "dev", "test")
SPLIT_SEED = 1234
EVAL_SIZE = 1000
_VERSION = "v1"  # bump when parsing changes: old caches are then ignored


@dataclass(frozen=True)
class Part:
    """One source language of a many->English mix (``mix.mix_corpora``): where its pairs sit in the
    mixed corpus's dev and test splits, and what it is (real or synthetic, high or low resource)."""

    corpus: str  # the corpus it came from (es-en, ca-en-synthetic, root:NAME)
    src: str  # its source language code: the key of per-language results
    synthetic: bool  # machine-made (apertium) sources
    note: str
    train_pairs: int  # distinct training pairs
    copies: int  # times each training pair is repeated in the mixed stream (temperature sampling)
    resource: str  # "high" or "low" (mix.resource_of)
    dev: tuple[int, int]  # [start, end) rows of the mixed corpus's dev split
    test: tuple[int, int]  # [start, end) rows of its test split

    def rows(self, split: str) -> range:
        """This language's rows of the mixed corpus's ``split`` (dev or test)."""
        if split not in ("dev", "test"):
            raise UserError(f"split={split!r} has no per-language rows; allowed: dev, test")
        return range(*getattr(self, split))

    def describe(self) -> dict:
        return {
            "corpus": self.corpus,
            "src": self.src,
            "synthetic": self.synthetic,
            "resource": self.resource,
            "train_pairs": self.train_pairs,
            "copies": self.copies,
            "note": self.note,
        }


@dataclass(frozen=True)
class Corpus:
    name: str
    src: str  # language codes
    tgt: str
    train: list[Pair]
    dev: list[Pair]
    test: list[Pair]
    synthetic: bool = False
    note: str = ""
    key: str = field(default="", compare=False)  # names the cache folder of its vocabularies
    parts: tuple[Part, ...] = ()  # a many->English mix: its languages (mix.mix_corpora); else empty

    def split(self, name: str) -> list[Pair]:
        if name not in SPLITS:
            raise UserError(f"split={name!r} is unknown; allowed: {', '.join(SPLITS)}")
        return getattr(self, name)

    def describe(self) -> dict:
        return {
            "corpus": self.name,
            "src": self.src,
            "tgt": self.tgt,
            "synthetic": self.synthetic,
            "note": self.note,
            **{f"{s}_pairs": len(self.split(s)) for s in SPLITS},
            **({"languages": [p.describe() for p in self.parts]} if self.parts else {}),
        }


def split_pairs(
    pairs: list[Pair], eval_size: int = EVAL_SIZE, seed: int = SPLIT_SEED
) -> dict[str, list[Pair]]:
    """Drop duplicates, shuffle with ``seed``, cut dev and test (``eval_size`` each), train the rest."""
    unique = list(dict.fromkeys(pairs))
    if len(unique) < 3 * eval_size:
        eval_size = len(unique) // 10
    order = torch.randperm(len(unique), generator=torch.Generator().manual_seed(seed)).tolist()
    shuffled = [unique[i] for i in order]
    return {
        "dev": shuffled[:eval_size],
        "test": shuffled[eval_size : 2 * eval_size],
        "train": shuffled[2 * eval_size :],
    }


def _write_tsv(path: Path, pairs: list[Pair]) -> None:
    # one temporary file per process: the first and last stages of a K >= 2 run may build
    # the same cache file at once; each replace is atomic and they write the same bytes
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for s, t in pairs:
            f.write(f"{' '.join(s.split())}\t{' '.join(t.split())}\n")
    tmp.replace(path)


def _read_tsv(path: Path) -> list[Pair]:
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f]  # type: ignore[misc]


def _cached_splits(name: str, build: Callable[[], dict[str, list[Pair]]]) -> dict[str, list[Pair]]:
    folder = translation_cache(name) / _VERSION
    paths = {s: folder / f"{s}.tsv" for s in SPLITS}
    if not all(p.exists() for p in paths.values()):
        splits = build()
        folder.mkdir(parents=True, exist_ok=True)
        for s, p in paths.items():
            _write_tsv(p, splits[s])
    return {s: _read_tsv(p) for s, p in paths.items()}  # the first run sees what later runs see


def _package(name: str, corpus: str) -> Path:
    try:
        return _fetch(name)
    except UserError as err:  # its message already says how to provide the corpus instead
        raise UserError(f"corpus {corpus}: {err}") from None


def _ding() -> dict[str, list[Pair]]:
    return split_pairs(ding.read_ding(_package("trans-de-en", "de-en")))


def _bible() -> dict[str, list[Pair]]:
    (es_pkg, es_mod), (en_pkg, en_mod) = bible.SPANISH, bible.ENGLISH
    es = bible.read_verses(_package(es_pkg, "es-en") / bible.SWORD_ROOT, es_mod)
    en = bible.read_verses(_package(en_pkg, "es-en") / bible.SWORD_ROOT, en_mod)
    return split_pairs(bible.align_verses(es, en))


# name -> (source language, target language, builder of the splits, note)
CORPORA: dict[str, tuple[str, str, Callable[[], dict[str, list[Pair]]], str]] = {
    "de-en": ("de", "en", _ding, "ding dictionary example sentences (Debian trans-de-en)"),
    "es-en": ("es", "en", _bible, "Bible verses, Reina-Valera 1909 / World English Bible (SWORD)"),
}
# synthetic name -> (source language, apertium pair translating the es-en English side)
SYNTHETIC: dict[str, tuple[str, str]] = {
    "ca-en-synthetic": ("ca", "eng-cat"),
    "es-en-synthetic": ("es", "eng-spa"),
    "gl-en-synthetic": ("gl", "en-gl"),
}


def _subset(
    splits: dict[str, list[Pair]], train_size: int | None, offset: int = 0
) -> dict[str, list[Pair]]:
    """Training pairs ``offset`` to ``offset + train_size`` (all after ``offset`` when null)."""
    if train_size is not None and train_size < 1:
        raise UserError(
            f"train_size={train_size} is invalid; allowed: an integer >= 1 (or null: all)"
        )
    n = len(splits["train"])
    if not 0 <= offset < n:
        raise UserError(
            f"train_offset={offset} is invalid for {n} training pairs; allowed: 0 to {n - 1}"
        )
    if train_size is None and offset == 0:
        return splits
    end = None if train_size is None else offset + train_size
    return {**splits, "train": splits["train"][offset:end]}


def _digest(pairs: list[Pair]) -> str:
    return hashlib.sha1("\n".join(f"{s}\t{t}" for s, t in pairs).encode()).hexdigest()[:12]


def load_corpus(
    name: str | None = None,
    *,
    root: str | Path | None = None,
    src: str | None = None,
    tgt: str = "en",
    train_size: int | None = None,
    train_offset: int = 0,
) -> Corpus:
    """A corpus by name (fetched and parsed on first use), or a user's from ``root``; its training
    split cut to ``train_size`` pairs after skipping ``train_offset``."""
    if root is not None:
        splits, src = read_root(Path(root), src, tgt)
        splits = _subset(splits, train_size, train_offset)
        label = f"root:{Path(root).name}"
        return Corpus(
            label,
            src,
            tgt,
            splits["train"],
            splits["dev"],
            splits["test"],
            note=f"user corpus in {root}",
            key=f"root-{_digest(splits['train'])}",
        )
    if name in CORPORA:
        s, t, build, note = CORPORA[name]
        splits = _subset(_cached_splits(name, build), train_size, train_offset)
        return Corpus(
            name, s, t, splits["train"], splits["dev"], splits["test"], note=note, key=name
        )
    if name in SYNTHETIC:
        return _synthetic(name, train_size, train_offset)
    allowed = ", ".join([*CORPORA, *SYNTHETIC])
    raise UserError(f"corpus={name!r} is unknown; allowed: {allowed}, or root=DIR for your own")


def _synthetic(name: str, train_size: int | None, train_offset: int = 0) -> Corpus:
    """Sources made by apertium from the ``es-en`` English side; only the lines used are translated."""
    lang, pair = SYNTHETIC[name]
    base = _subset(_cached_splits("es-en", CORPORA["es-en"][2]), train_size, train_offset)
    cache = translation_cache(name) / "apertium"
    splits = {
        s: list(
            zip(
                apertium.translate_cached([t for _, t in base[s]], pair, cache),
                [t for _, t in base[s]],
            )
        )
        for s in SPLITS
    }
    note = f"SYNTHETIC source: apertium {pair} machine translation of the es-en English side"
    return Corpus(
        name,
        lang,
        "en",
        splits["train"],
        splits["dev"],
        splits["test"],
        synthetic=True,
        note=note,
        key=name,
    )


def _how(root: Path) -> str:
    return (
        f"expected train, dev and test files named <split>.<lang>, one sentence per line, in {root}"
    )


def check_root(root: Path, src: str | None, tgt: str) -> str:
    """The source language of a user's corpus folder, once its files are all there (UserError)."""
    if not root.is_dir():
        raise UserError(f"root={root} is not a directory; {_how(root)}")
    if src is None:
        langs = sorted({p.suffix[1:] for p in root.glob("train.*")} - {tgt})
        if len(langs) != 1:
            raise UserError(
                f"root={root}: cannot tell the source language from train.* files "
                f"(found {langs or 'none'} besides {tgt}); pass src=LANG; {_how(root)}"
            )
        src = langs[0]
    missing = [
        f"{s}.{lang}" for s in SPLITS for lang in (src, tgt) if not (root / f"{s}.{lang}").is_file()
    ]
    if missing:
        raise UserError(f"root={root} lacks {', '.join(missing)}; {_how(root)}")
    return src


def read_root(root: Path, src: str | None, tgt: str) -> tuple[dict[str, list[Pair]], str]:
    """``train/dev/test.<src>`` and ``.<tgt>`` under ``root``; returns the splits and ``src``."""
    src = check_root(root, src, tgt)
    splits: dict[str, list[Pair]] = {}
    for s in SPLITS:
        a = (root / f"{s}.{src}").read_text(encoding="utf-8").splitlines()
        b = (root / f"{s}.{tgt}").read_text(encoding="utf-8").splitlines()
        if len(a) != len(b):
            raise UserError(
                f"root={root}: {s}.{src} has {len(a)} lines but {s}.{tgt} has {len(b)}; "
                f"line i of one must translate line i of the other"
            )
        splits[s] = [
            (" ".join(x.split()), " ".join(y.split()))
            for x, y in zip(a, b)
            if x.strip() and y.strip()
        ]
        if not splits[s]:
            raise UserError(
                f"root={root}: {s}.{src}/{s}.{tgt} hold no sentence pairs; {_how(root)}"
            )
    return splits, src
