"""The verdict rules (``paper/verdict.py``): each stated once, each tested where it turns."""

import pytest

from gpipe_repro.paper.stats import compare, sample
from gpipe_repro.paper.verdict import (
    MEASURED,
    NOT,
    SIMULATED,
    TOLERANCE,
    UNTESTABLE,
    Finding,
    at_most,
    exact,
    ratio,
    seeded,
    within,
)

LOW = sample([10.0, 10.1, 9.9, 10.05, 9.95])
HIGH = sample([12.0, 12.1, 11.9, 12.05, 11.95])
SAME = sample([10.0, 10.1, 9.9, 10.05, 9.95])
WIDE = sample([5.0, 15.0])


def test_seeded_all_beyond_the_noise_the_claims_way_is_reproduced():
    assert seeded([(compare(LOW, HIGH), 1)]) == MEASURED
    assert seeded([(compare(LOW, HIGH), 1)], "simulated") == SIMULATED


def test_seeded_any_beyond_the_noise_the_other_way_is_not_reproduced():
    assert seeded([(compare(LOW, HIGH), 1), (compare(LOW, HIGH), -1)]) == NOT


def test_seeded_inside_the_noise_is_not_reproduced_and_seeds_that_cannot_tell_are_untestable():
    inside = compare(LOW, SAME)
    assert inside.verdict == "inside the noise"
    assert seeded([(compare(LOW, HIGH), 1), (inside, 1)]) == NOT
    untestable = compare(LOW, WIDE)
    assert untestable.verdict == "not testable with these seeds"
    assert seeded([(compare(LOW, HIGH), 1), (untestable, 1)]) == UNTESTABLE
    assert seeded([]) == UNTESTABLE


def test_a_ratio_is_reproduced_within_the_stated_tolerance_only():
    edge = 1 + TOLERANCE
    assert within(edge * 0.999, 1.0) and not within(edge * 1.001, 1.0)
    assert ratio(0.86, 1.0, "simulated") == SIMULATED and ratio(0.84, 1.0, "measured") == NOT
    assert ratio(1.0, 1.0, "measured") == MEASURED


def test_at_most_lets_ours_be_smaller_than_the_papers_by_any_amount():
    assert at_most(1.08, 1.38) and at_most(0.5, 1.38) and not at_most(1.38 * 1.2, 1.38)


def test_exact_and_the_four_words():
    assert exact(True) == MEASURED and exact(False) == NOT
    with pytest.raises(ValueError, match="is none of"):
        Finding("partly reproduced", "", "")
