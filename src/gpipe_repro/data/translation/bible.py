"""Spanish->English verse pairs: Reina-Valera 1909 and the World English Bible, aligned by verse.

Both are public-domain SWORD modules shipped by Debian (``sword-text-sparv``: ``spaRV1909eb``,
``sword-text-web``: ``engWEB2015eb``) and read with ``pysword``. A SWORD library root is the folder
holding ``mods.d/*.conf``; in an unpacked package that is ``usr/share/sword``. Verses are keyed by
(book, chapter, verse) in each module's own versification (RV1909: KJV, WEB: NRSVA, which number
the shared books alike); a pair is a key present and non-empty in both, of plausible lengths.

The text is OSIS markup: footnotes (``<note>``) are dropped with their content, every other tag is
removed keeping its text (Strong's ``<w>`` word tags, ``<title>`` psalm headings, poetry lines).
pysword decompresses a whole book to read one verse; caching the last decompressed block makes a
full read take seconds instead of minutes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path

from ...errors import UserError

__all__ = ["clean_osis", "read_verses", "align_verses", "SPANISH", "ENGLISH", "SWORD_ROOT"]

SWORD_ROOT = "usr/share/sword"  # inside an unpacked sword-text-* package
SPANISH = ("sword-text-sparv", "spaRV1909eb")
ENGLISH = ("sword-text-web", "engWEB2015eb")

VerseKey = tuple[str, int, int]
MAX_WORDS, MAX_RATIO = 120, 2.5
_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")


def clean_osis(text: str) -> str:
    """Plain text of one OSIS verse."""
    text = _NOTE.sub(" ", text)
    text = _TAG.sub("", text)
    return _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACE.sub(" ", text)).strip()


def read_verses(sword_root: Path, module: str) -> dict[VerseKey, str]:
    """Every verse of a SWORD Bible module as plain text, keyed by (OSIS book, chapter, verse)."""
    try:
        from pysword.modules import SwordModules
    except ImportError:
        raise UserError(
            "the es-en corpus needs pysword to read SWORD Bibles: pip install pysword"
        ) from None

    modules = SwordModules(str(sword_root))
    found = modules.parse_modules()
    if module not in found:
        raise FileNotFoundError(
            f"SWORD module {module} not in {sword_root} (found: {sorted(found)})"
        )
    bible = modules.get_bible_from_module(module)
    # Verses of one book share a compressed block: keep the last few decompressed.
    bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)
    verses: dict[VerseKey, str] = {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            for chapter, n_verses in enumerate(book.chapter_lengths, start=1):
                texts = list(bible.get_iter(books=book.name, chapters=chapter, clean=False))
                if len(texts) != n_verses:  # a block that failed to read: skip the chapter
                    continue
                for verse, raw in enumerate(texts, start=1):
                    text = clean_osis(raw)
                    if text:
                        verses[(book.osis_name, chapter, verse)] = text
    return verses


def align_verses(
    source: Mapping[VerseKey, str],
    target: Mapping[VerseKey, str],
    *,
    max_words: int = MAX_WORDS,
    max_ratio: float = MAX_RATIO,
) -> list[tuple[str, str]]:
    """(source, target) text of every verse both sides have, in the source's order.

    Drops the few pairs that cannot be translations of each other: a side over ``max_words`` words
    (the WEB's last verse carries its appendix) or word counts differing by more than ``max_ratio``
    (verses the two versifications split differently).
    """
    pairs = []
    for key, text in source.items():
        if key not in target:
            continue
        a, b = len(text.split()), len(target[key].split())
        if max(a, b) <= max_words and max(a, b) <= max_ratio * min(a, b):
            pairs.append((text, target[key]))
    return pairs
