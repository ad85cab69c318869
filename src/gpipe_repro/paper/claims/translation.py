"""The claims of §5 (Fig. 3 and Table 5), judged from ``reports/fig3/``, ``fig3_tricks/`` and ``table5/``.

Every one is seeded: each comparison by ``paper.stats``, the verdict by ``verdict.seeded``. The
paper's own scale — 102 languages, 25 billion examples, models of up to 6 billion parameters,
German->English batches of 260K-4M tokens — is not testable on this machine; its claims are tested
on a small analogue (es, ca, gl -> en from the Bible; T(L, H, A) of a few million parameters).
"""

from __future__ import annotations

from pathlib import Path

from .. import fig3 as f3
from .. import fig3_tricks as tricks
from .. import table5 as t5
from ..stats import Comparison
from ..verdict import UNTESTABLE, Finding, seeded
from . import Missing, results


def _fig3(folder: Path) -> list[f3.Fig3Row]:
    return results(folder, f3.Fig3Row)


def _each(parts: list[tuple[str, Comparison]]) -> str:
    return "; ".join(f"{what} {c.delta:+.2f} ({c.verdict})" for what, c in parts)


def capacity(folder: Path) -> Finding:
    """BLEU rises with capacity: every language, each bigger model against the smallest."""
    got = f3.claims(_fig3(folder))["capacity"]
    if not got:
        raise Missing("the smallest or the bigger models did not run")
    parts = [(f"{lang} {big}", c) for big, lang, c in got]
    return Finding(seeded([(c, 1) for _, _, c in got]), _each(parts),
                   "BLEU of each language, bigger model against T(1,512,4)")  # fmt: skip


def low_resource(folder: Path) -> Finding:
    """The gain is largest on low-resource languages: per seed, low minus high BLEU of the bigger
    model against the smallest's."""
    got = f3.claims(_fig3(folder))["resource"]
    if not got:
        raise Missing("not both kinds of language")
    ours = "; ".join(f"{big}: low {lo:+.2f}, high {hi:+.2f} BLEU" for big, lo, hi, _ in got)
    verdict = seeded([(c, 1) for *_, c in got])
    return Finding(
        verdict, ours, "(low − high) gain per seed: " + _each([(b, c) for b, *_, c in got])
    )


def deep_wide(folder: Path) -> Finding:
    """The deep model beats the wide one of the same parameters on low-resource languages."""
    got = f3.claims(_fig3(folder))["deep_wide"] or []
    low = [(g, d, w, c) for g, d, w, c in got if g == "low"]
    if not low:
        raise Missing("the deep or the wide model did not run on low-resource languages")
    g, d, w, c = low[0]
    return Finding(seeded([(c, 1)]), f"deep {d} vs wide {w} BLEU (low-resource)",
                   f"deep − wide {c.delta:+.2f} ({c.verdict})")  # fmt: skip


def trainability(folder: Path) -> Finding:
    """The tricks make a deep model trainable: judged only where both arms trained, else not
    testable here with what the data do show."""
    a = tricks.arms(_fig3(folder))
    if a is None:
        raise Missing("no model with and without the tricks")
    bleu = f"test BLEU {a.bleu[0].mean:.2f} with vs {a.bleu[1].mean:.2f} without"
    nll = f"test NLL {a.nll[0].mean:.1f} vs {a.nll[1].mean:.1f}"
    if a.uniform is not None:
        nll += f" (a uniform guess: ln {a.vocab:,} = {a.uniform:.1f})"
    if not a.trained:
        spike = a.results[0][1]
        return Finding(
            UNTESTABLE,
            f"{bleu}; {nll}",
            f"neither arm trains in {a.updates} updates (BLEU < {tricks.TRAINED_BLEU:g}); what the "
            f"data allow: the tricks shrink the loss spike by {spike.delta:.1f} ({spike.verdict})",
        )
    return Finding(seeded([(c, 1) for _, c in a.results]), f"{bleu}; {nll}",
                   "; ".join(f"{w}: {c.verdict}" for w, c in a.results))  # fmt: skip


def batch_size(folder: Path) -> Finding:
    """Bigger batches, better BLEU and NLL, on the paper's design (the same updates); the
    confound (token-matched: the same data seen) in the reason."""
    rs = results(folder, t5.Table5Row)
    same, matched = t5.series(rs, True), t5.series(rs, False)
    if len(same) < 2:
        raise Missing("fewer than two batch sizes at the same updates")
    cs, ms = t5.comparisons(same), t5.comparisons(matched)
    sizes = " → ".join(f"{p.batch_tokens:,}" for p in same)
    ours = (
        f"same updates ({sizes} tokens): BLEU "
        + " → ".join(f"{p.of('bleu').mean:.2f}" for p in same)
        + ", NLL "
        + " → ".join(f"{p.of('nll').mean:.2f}" for p in same)
    )
    reason = f"each step {', '.join(c.verdict for c, _ in cs)}"
    if ms:
        bleus = " → ".join(f"{p.of('bleu').mean:.2f}" for p in matched)
        reason += f"; token-matched (the confound: the same data seen): {seeded(ms)} (BLEU {bleus})"
    return Finding(seeded(cs), ours, reason)


def unavailable(folder: Path, what: str) -> Finding:
    """Not testable here, for the reason ``what`` (the claim's data and scale)."""
    return Finding(UNTESTABLE, "—", what)
