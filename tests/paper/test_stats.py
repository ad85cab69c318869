"""The one noise rule: Welch's test against a textbook example, the detectable effect against a
simulation, and the verdict words; Spearman's rank correlation."""

import random

import pytest
from scipy import stats

from gpipe_repro.paper.stats import (
    BEYOND,
    INSIDE,
    UNTESTABLE,
    Sample,
    compare,
    detectable_effect,
    sample,
    spearman,
    trend,
)

# Welch's t-test, Wikipedia's first example (two samples of 15): t = -2.46, df = 24.99, p = 0.021.
A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]


def test_welch_matches_the_textbook_example():
    c = compare(sample(A2), sample(A1))  # A1 - A2
    assert c.t == pytest.approx(-2.46, abs=0.005)
    assert c.df == pytest.approx(24.99, abs=0.01)
    assert c.p == pytest.approx(0.021, abs=0.0005)
    assert c.delta == pytest.approx(sum(A1) / 15 - sum(A2) / 15)
    assert c.verdict == BEYOND and c.beyond


def test_the_detectable_effect_is_detected_four_times_in_five():
    # Two settings of 5 seeds, sd 1 each: draw many experiments whose true difference is the
    # detectable effect, and count how often Welch's test rejects at 0.05.
    n, sd = 5, 1.0
    se = (2 * sd**2 / n) ** 0.5
    d = detectable_effect(se, 2 * n - 2)
    rng = random.Random(0)
    trials, student, welch = 4000, 0, 0
    for _ in range(trials):
        a = [rng.gauss(0.0, sd) for _ in range(n)]
        b = [rng.gauss(d, sd) for _ in range(n)]
        student += stats.ttest_ind(b, a).pvalue < 0.05  # exactly noncentral t with 2n - 2 df
        welch += stats.ttest_ind(b, a, equal_var=False).pvalue < 0.05
    assert 0.78 < student / trials < 0.82, student / trials
    # Welch's df from sample sds is a little below 2n - 2, so its power a little below 0.80
    assert 0.74 < welch / trials < 0.81, welch / trials
    # and the large-sample limit: (z_0.975 + z_0.8) standard errors
    assert detectable_effect(1.0, 10_000) == pytest.approx(1.96 + 0.8416, abs=0.01)


def test_the_verdict_words():
    tight_a, tight_b = sample([10.0, 10.1, 9.9, 10.0]), sample([10.05, 9.95, 10.0, 10.1])
    c = compare(tight_a, tight_b)  # no difference, and the seeds could see 10% of 10
    assert c.p > 0.05 and c.detectable < 1.0 and c.verdict == INSIDE
    loose_a, loose_b = sample([5.0, 15.0, 10.0]), sample([6.0, 16.0, 9.0])
    c = compare(loose_a, loose_b)  # the seeds could not see a 1.0 effect
    assert c.p > 0.05 and c.detectable > 1.0 and c.verdict == UNTESTABLE
    assert compare(loose_a, loose_b, effect=50.0).verdict == INSIDE  # but a 50.0 one, yes
    assert compare(sample([1.0]), loose_b).verdict == UNTESTABLE  # one seed: no noise to judge
    assert compare(sample([1.0, 1.0]), sample([2.0, 2.0])).verdict == UNTESTABLE  # no spread
    assert "not testable with these seeds" in compare(sample([1.0]), loose_b).text()
    text = compare(sample([1, 1.1, 0.9]), sample([5, 5.1, 4.9])).text()
    assert (
        text.startswith("+4.00 (t = ")
        and "df = 4.0" in text
        and text.endswith(": beyond the noise)")
    )


def test_a_sample_ignores_what_is_not_a_number():
    s = sample([1.0, None, float("nan"), 3.0])
    assert s == Sample((1.0, 3.0)) and s.mean == 2.0 and s.sd == pytest.approx(2**0.5)
    assert s.text() == "2.00 ± 1.41" and sample([2.0]).text() == "2.00"


def test_a_trend_is_judged_step_by_step():
    up = [sample([1, 1.1, 0.9]), sample([5, 5.1, 4.9])]
    text, verdict = trend(up, ["a", "b"], "BLEU", True)
    assert verdict is True and "each beyond the noise" in text
    _, verdict = trend(up[::-1], ["a", "b"], "BLEU", True)
    assert verdict is False
    text, verdict = trend([sample([1, 3, 2]), sample([2, 1, 3.5])], ["a", "b"], "BLEU", True)
    assert verdict is None and "not every step beyond the noise" in text
    assert "(t = " in text and ": not testable with these seeds)" in text
    assert trend(up[:1], ["a"], "BLEU", True) == (
        "BLEU: one setting only; no trend to judge.",
        None,
    )


def test_spearman_is_one_for_the_same_order_and_minus_one_reversed():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)  # 1 - 6*4/(5*24)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)  # tied ranks averaged
    assert spearman([1.0], [2.0]) is None
