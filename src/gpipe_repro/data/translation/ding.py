"""German->English sentence pairs from the TU Chemnitz "ding" dictionary (Debian ``trans-de-en``).

The file ``/usr/share/trans/de-en`` holds one entry per line, ``de | de ... :: en | en ...``: the
``|``-separated sub-entries of the two sides correspond one to one, and a sub-entry may list
alternatives separated by ``;``. Annotations sit in braces (``{m}``), brackets (``[coll.]``) and
angle brackets (``<Abk.>``). Besides hundreds of thousands of words and phrases, many sub-entries are
example sentences. We keep a pair when, annotations stripped and taking each side's first
alternative, both sides are sentences: they end in ``.``, ``?`` or ``!``, have at least four words and
do not end in a dictionary abbreviation (``etw.``, ``sth.``); then we drop duplicates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["parse_ding", "clean_entry", "is_sentence", "DING_FILE"]

DING_FILE = "usr/share/trans/de-en"  # inside the unpacked package
_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?])")
# placeholders of the dictionary, not sentence ends: etw., jdm., jdn., jds., sth., sb., sb.'s ...
_ABBREV_END = re.compile(r"(?:^|\s)(?:etw|jd[mns]?|sth|sb|usw|etc|ca)\.$", re.IGNORECASE)
MIN_WORDS = 4


def clean_entry(text: str) -> str:
    """A sub-entry's first alternative with annotations removed and spaces normalised."""
    first = text.split(";", 1)[0]
    first = _ANNOTATION.sub(" ", first)
    return _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACE.sub(" ", first)).strip()


def is_sentence(text: str) -> bool:
    return (
        text[-1:] in (".", "?", "!")
        and len(text.split()) >= MIN_WORDS
        and not _ABBREV_END.search(text)
    )


def parse_ding(lines: Iterable[str]) -> list[tuple[str, str]]:
    """Unique (German, English) sentence pairs, in file order."""
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for line in lines:
        if line.startswith("#") or "::" not in line:
            continue
        de, en = line.rstrip("\n").split("::", 1)
        de_parts, en_parts = de.split("|"), en.split("|")
        if len(de_parts) != len(en_parts):
            continue  # malformed: the sub-entries cannot be matched
        for d, e in zip(de_parts, en_parts):
            pair = (clean_entry(d), clean_entry(e))
            if is_sentence(pair[0]) and is_sentence(pair[1]) and pair not in seen:
                seen.add(pair)
                pairs.append(pair)
    return pairs


def read_ding(tree: Path) -> list[tuple[str, str]]:
    """The pairs of an unpacked ``trans-de-en`` tree."""
    with open(tree / DING_FILE, encoding="utf-8") as f:
        return parse_ding(f)
