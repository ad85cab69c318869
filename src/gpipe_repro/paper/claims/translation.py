"""The claims of §5 (Fig. 3 and Table 5), judged from ``reports/fig3/``, ``fig3_tricks/`` and ``table5/``.

Every one is seeded: each comparison by ``paper.stats``, the verdict by ``verdict.seeded``. The
paper's own scale — 102 languages, 25 billion examples, models of up to 6 billion parameters,
German->English batches of 260K-4M tokens — is not testable on this machine; its claims are tested
on a small analogue (es, ca, gl -> en from the Bible; T(L, H, A) of a few million parameters). The
findings are worded by ``templates/claims_translation.md.j2``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from .. import fig3 as f3
from .. import table5 as t5
from ..fig3_rows import Fig3Row
from ..table5_rows import Table5Row
from ..verdict import UNTESTABLE, Finding, seeded
from . import Missing, results, worded

found = partial(worded, "claims_translation")


def _fig3(folder: Path) -> list[Fig3Row]:
    return results(folder, Fig3Row)


def capacity(folder: Path) -> Finding:
    """BLEU rises with capacity: every language, each bigger model against the smallest."""
    got = f3.claims(_fig3(folder))["capacity"]
    if not got:
        raise Missing("the smallest or the bigger models did not run")
    return found("capacity", seeded([(c, 1) for _, _, c in got]), got=got)


def low_resource(folder: Path) -> Finding:
    """The gain is largest on low-resource languages: per seed, low minus high BLEU of the bigger
    model against the smallest's."""
    got = f3.claims(_fig3(folder))["resource"]
    if not got:
        raise Missing("not both kinds of language")
    return found("low_resource", seeded([(c, 1) for *_, c in got]), got=got)


def deep_wide(folder: Path) -> Finding:
    """The deep model beats the wide one of the same parameters on low-resource languages."""
    got = f3.claims(_fig3(folder))["deep_wide"] or []
    low = [(g, d, w, c) for g, d, w, c in got if g == "low"]
    if not low:
        raise Missing("the deep or the wide model did not run on low-resource languages")
    g, d, w, c = low[0]
    return found("deep_wide", seeded([(c, 1)]), deep=d, wide=w, x=c)


def trainability(folder: Path) -> Finding:
    """The tricks make a deep model trainable: judged only where both arms trained, else not
    testable here with what the data do show."""
    a = f3.arms(_fig3(folder))
    if a is None:
        raise Missing("no model with and without the tricks")
    verdict = seeded([(c, 1) for _, c in a.results]) if a.trained else UNTESTABLE
    return found("trainability", verdict, a=a, trained_bleu=f3.TRAINED_BLEU)


def batch_size(folder: Path) -> Finding:
    """Bigger batches, better BLEU and NLL, on the paper's design (the same updates); the
    confound (token-matched: the same data seen) in the reason."""
    rs = results(folder, Table5Row)
    same, matched = t5.series(rs, True), t5.series(rs, False)
    if len(same) < 2:
        raise Missing("fewer than two batch sizes at the same updates")
    cs, ms = t5.comparisons(same), t5.comparisons(matched)
    return found("batch_size", seeded(cs), same=same, matched=matched, cs=cs,
                 ms=seeded(ms) if ms else None)  # fmt: skip


def unavailable(folder: Path, what: str) -> Finding:
    """Not testable here, for the reason ``what`` (the claim's data and scale; §4's too)."""
    return Finding(UNTESTABLE, "—", what)
