"""Parallel corpora: the ding parser, OSIS cleaning and verse alignment, fixed splits, user roots,
apertium's chunk cache, and one-line errors when a corpus cannot be had. No network by default."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _shared import archive_reachable, write_corpus

from gpipe_repro.data import debian
from gpipe_repro.data.translation import TranslationConfig, apertium, corpus
from gpipe_repro.data.translation.bible import align_verses, clean_osis
from gpipe_repro.data.translation.corpus import load_corpus, split_pairs
from gpipe_repro.data.translation.ding import is_sentence, parse_ding
from gpipe_repro.errors import UserError

# Lines in the format of /usr/share/trans/de-en (trans-de-en 1.9-6).
DING = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later; GNU General Public License
Aal {m} (auf der Speisekarte) [cook.] | Aal blau; blauer Aal :: Eel (on a menu) | Eel au bleu
Abend {m} | Es wird Abend. | Noch ist nicht aller Tage Abend.; Man soll den Tag nicht vor dem Abend loben. :: evening | It is getting dark. | It's not over until it's over.; Don't count your chickens.
abfahren {vi} | Der Zug fährt um acht Uhr ab [Bahn]. :: to depart | The train leaves at eight o'clock [rail].
Ahnung {f} | Ich habe keine Ahnung von etw. :: idea | I have no idea about sth.
Angst {f} | Ich habe große Angst {f} vor Hunden. | extra :: fear | I am very afraid of dogs.
Abend {m} | Es wird Abend. :: evening | It is getting dark.
Bahn {f} | Er fuhr mit der Bahn nach Hause. :: train | He went home by train.
"""


def test_ding_keeps_sentence_pairs_strips_annotations_and_dedupes():
    pairs = parse_ding(DING.splitlines(keepends=True))
    assert pairs == [
        ("Noch ist nicht aller Tage Abend.", "It's not over until it's over."),  # first alternative
        ("Der Zug fährt um acht Uhr ab.", "The train leaves at eight o'clock."),  # [..] stripped
        ("Er fuhr mit der Bahn nach Hause.", "He went home by train."),
    ]
    # "Es wird Abend." has 3 words; "... etw." ends in a placeholder; the Angst line's sub-entries
    # do not match up (3 German, 2 English) so none is trusted; the repeated Abend line adds nothing.
    assert not is_sentence("Es wird Abend.") and not is_sentence("Ich habe keine Ahnung von etw.")


def test_osis_cleaning_and_verse_alignment():
    raw = (
        '<w lemma="strong:H0430">God</w><note placement="foot"><reference>1:1 </reference>'
        'The Hebrew word is “Elohim”.</note><w lemma="strong:H1254">created</w> <w>the</w> '
        '<w>earth</w> . <l eID="x"/>'
    )
    assert clean_osis(raw) == "God created the earth."
    es = {
        ("Gen", 1, 1): "En el principio creó Dios.",
        ("Gen", 1, 2): "Y la tierra.",
        ("Gen", 1, 3): "uno",
        ("Rev", 22, 21): "La gracia sea con todos.",
    }
    en = {
        ("Gen", 1, 1): "In the beginning God created.",
        ("Gen", 1, 3): "one two three four five six",
        ("Rev", 22, 21): "The grace be with all. " + "appendix " * 200,
        ("Exod", 1, 1): "Now.",
    }
    # Gen 1:2 has no English verse, Gen 1:3 is 1 word against 6 (ratio > 2.5), Rev 22:21 too long.
    assert align_verses(es, en) == [("En el principio creó Dios.", "In the beginning God created.")]
    assert len(align_verses(es, en, max_ratio=6.0)) == 2


def _pairs(n: int) -> list[tuple[str, str]]:
    return [(f"frase número {i} .", f"sentence number {i} .") for i in range(n)]


def test_splits_are_fixed_disjoint_and_deduplicated():
    pairs = _pairs(5000) + _pairs(100)  # 100 duplicates
    a, b = split_pairs(pairs), split_pairs(list(pairs))
    assert a == b
    assert [len(a[s]) for s in ("train", "dev", "test")] == [3000, 1000, 1000]
    assert not set(a["train"]) & set(a["dev"]) and not set(a["dev"]) & set(a["test"])
    assert split_pairs(pairs, seed=1)["dev"] != a["dev"]
    assert a["dev"] != _pairs(5000)[:1000]  # shuffled, not the file order


def test_named_corpus_is_parsed_once_then_read_from_the_tsv_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path))
    calls = []

    def build():
        calls.append(1)
        return split_pairs(_pairs(400) + [("tab\tinside", "a line")])

    monkeypatch.setitem(corpus.CORPORA, "xx-en", ("xx", "en", build, "fixture"))
    first = load_corpus("xx-en")
    second = load_corpus("xx-en", train_size=50)
    assert len(calls) == 1 and (tmp_path / "translation/xx-en/v1/train.tsv").exists()
    assert second.dev == first.dev and second.train == first.train[:50]
    assert ("tab inside", "a line") in first.train + first.dev + first.test


def _write_root(root: Path, n: int = 30, src: str = "de") -> None:
    pairs = [(f"Satz {i} .", f"sentence {i} .") for i in range(n)]
    write_corpus(root, src, {split: pairs for split in ("train", "dev", "test")})


def test_user_root_is_read_and_its_source_language_inferred(tmp_path):
    _write_root(tmp_path / "corp")
    c = load_corpus(root=tmp_path / "corp")
    assert (c.src, c.tgt, len(c.train), len(c.test)) == ("de", "en", 30, 30)
    assert c.train[3] == ("Satz 3 .", "sentence 3 .") and not c.synthetic


@pytest.mark.parametrize(
    "damage,expect",
    [
        (lambda r: shutil.rmtree(r), "is not a directory"),
        (lambda r: (r / "dev.en").unlink(), "lacks dev.en"),
        (
            lambda r: (r / "test.de").write_text("only one line\n"),
            "test.de has 1 lines but test.en has 30",
        ),
        (lambda r: (r / "train.fr").write_text("x\n"), "cannot tell the source language"),
    ],
)
def test_bad_root_is_one_line(tmp_path, damage, expect):
    root = tmp_path / "corp"
    _write_root(root)
    damage(root)
    with pytest.raises(UserError, match=expect) as err:
        load_corpus(root=root)
    assert "\n" not in str(err.value)
    if (
        "lines" not in expect
    ):  # what needs no reading is refused at the edge, before any rank starts
        with pytest.raises(UserError, match=expect):
            TranslationConfig(root=str(root)).check()


def test_unknown_corpus_is_one_line():
    with pytest.raises(
        UserError, match=r"corpus='xx' is unknown; allowed: de-en, es-en, .*root=DIR"
    ):
        load_corpus("xx")


def test_no_apt_get_is_one_line_saying_how_to_provide_the_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path))
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    with pytest.raises(UserError) as err:
        load_corpus("de-en")
    msg = str(err.value)
    assert msg.startswith(
        "corpus de-en: `apt-get` not found (needed to fetch the Debian package trans-de-en)"
    )
    assert "\n" not in msg and "root=DIR" in msg


def test_missing_archive_is_one_line(tmp_path, monkeypatch):
    """apt-get cannot find the package (no `apt-get update`, or no such archive)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text("#!/bin/sh\necho 'E: Unable to locate package '$2 >&2\nexit 100\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    if shutil.which("dpkg") is None:
        (bin_dir / "dpkg").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "dpkg").chmod(0o755)
    with pytest.raises(UserError) as err:
        load_corpus("es-en")
    msg = str(err.value)
    assert msg.startswith("corpus es-en: `apt-get download sword-text-sparv`")
    assert "\n" not in msg and "apt-get update" in msg and "root=DIR" in msg


def test_apertium_mode_is_pointed_at_the_unpacked_tree():
    mode = "lt-proc '/usr/share/apertium/apertium-eng-cat/a.bin' | lt-proc $1 '/usr/share/apertium/b.bin' $2\n"
    got = apertium.mode_pipeline(mode, Path("/cache/debian/apertium-eng-cat"))
    assert got == (
        "lt-proc '/cache/debian/apertium-eng-cat/usr/share/apertium/apertium-eng-cat/a.bin' "
        "| lt-proc -n '/cache/debian/apertium-eng-cat/usr/share/apertium/b.bin'"
    )


def test_apertium_output_is_cached_per_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(apertium, "CHUNK", 4)
    seen: list[str] = []

    def fake(lines, pair):
        seen.extend(lines)
        return [f"<{pair}> {x}" for x in lines]

    lines = [f"line {i}" for i in range(10)]
    assert apertium.translate_cached(lines[:6], "eng-cat", tmp_path, fake)[5] == "<eng-cat> line 5"
    assert len(seen) == 6
    out = apertium.translate_cached(lines, "eng-cat", tmp_path, fake)
    # chunk 0-3 came from the cache; 4-7 is a new chunk (it now holds 4 lines), 8-9 too
    assert out == [f"<eng-cat> line {i}" for i in range(10)] and seen[6:] == lines[4:]


@pytest.mark.network
def test_real_ding_package_gives_thousands_of_sentence_pairs(tmp_path, monkeypatch):
    """Fetches Debian trans-de-en (~6 MB) through apt-get: needs apt-get and the package archive."""
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path))
    with archive_reachable():
        c = load_corpus("de-en")
    n = len(c.train) + len(c.dev) + len(c.test)
    assert n > 15_000 and len(c.dev) == len(c.test) == corpus.EVAL_SIZE
    assert all(is_sentence(s) and is_sentence(t) for s, t in c.dev)
