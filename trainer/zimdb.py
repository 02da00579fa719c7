"""zIMDB: the synthetic movie-review corpus the demo and the tests train on, generated offline.

A review opens with two to four verdict clauses ("the acting was not gripping honestly") whose sentiment
words, flipped by a negation just before them, decide the true label; a long plot summary of neutral
words follows, so documents run past `data.max_len` (64) and truncation is exercised. The vocabulary has
a few thousand words (names, places and plot words drawn Zipf-like, as in real text), and a share
`LABEL_NOISE` of the labels is flipped, as annotators do: no model can beat 1 - LABEL_NOISE on average,
and `ceiling()` gives the exact figure for a given split. Everything derives from (size, seed).
"""

from __future__ import annotations

import itertools
import random

POSITIVE = "great wonderful brilliant moving superb charming delightful gripping funny beautiful".split()  # noqa: SIM905
NEGATIVE = "awful boring dull terrible clumsy tedious bland weak predictable messy".split()  # noqa: SIM905
NEGATIONS = "not never hardly".split()  # noqa: SIM905
SUBJECTS = "movie film plot acting cast script ending score sequel".split()  # noqa: SIM905
FILLER = "and with a very quite rather really in its of to honestly overall scenes story director".split()  # noqa: SIM905
LABEL_NOISE = 0.1
VERDICT_WORDS = 4 * 8  # at most 4 clauses of at most 8 words: the label is decided within max_len >= 32

_ONSETS = "b br c ch d dr f g gr h j k l m n p pr r s sh st t tr v w z".split()  # noqa: SIM905
_VOWELS = "a e i o u ai ea io ou".split()  # noqa: SIM905
_CODAS = ["", "", "n", "r", "s", "l", "th", "nd", "x", "m"]


def _plot_vocabulary() -> list[str]:
    """About 4,000 pronounceable made-up words, the same on every machine (they replace real names)."""
    syllables = [o + v + c for o, v, c in itertools.product(_ONSETS, _VOWELS, _CODAS)]
    rng = random.Random(12345)
    words: set[str] = set()
    while len(words) < 4000:
        words.add("".join(rng.choice(syllables) for _ in range(rng.choice((2, 2, 3)))))
    reserved = set(POSITIVE + NEGATIVE + NEGATIONS + SUBJECTS + FILLER)
    return sorted(words - reserved)


PLOT_WORDS = _plot_vocabulary()
# Zipf's law: the k-th most frequent word turns up about 1/k as often as the first.
_PLOT_CUM_WEIGHTS = list(itertools.accumulate(1 / k for k in range(1, len(PLOT_WORDS) + 1)))


def _review(rng: random.Random) -> tuple[str, int] | None:
    words, score = [], 0
    for _ in range(rng.randint(2, 4)):
        words += ["the", rng.choice(SUBJECTS), "was"]
        negated = rng.random() < 0.3
        if negated:
            words.append(rng.choice(NEGATIONS))
        positive = rng.random() < 0.5
        words.append(rng.choice(POSITIVE if positive else NEGATIVE))
        score += (1 if positive else -1) * (-1 if negated else 1)
        words += rng.sample(FILLER, rng.randint(1, 3))
    if score == 0:  # a tie has no label
        return None
    words += rng.choices(PLOT_WORDS, cum_weights=_PLOT_CUM_WEIGHTS, k=rng.randint(60, 160))
    return " ".join(words), int(score > 0)


def reviews(size: int, seed: int) -> list[tuple[str, int, int]]:
    """(text, label, true label): `label` is the true one flipped with probability LABEL_NOISE."""
    rng = random.Random(seed)
    out: list[tuple[str, int, int]] = []
    while len(out) < size:
        review = _review(rng)
        if review is not None:
            text, truth = review
            out.append((text, truth ^ (rng.random() < LABEL_NOISE), truth))
    return out


def corpus(size: int, seed: int) -> list[tuple[str, int]]:
    """Deterministic synthetic reviews (label 1 positive, 0 negative); same (size, seed), same corpus."""
    return [(text, label) for text, label, _ in reviews(size, seed)]


def ceiling(size: int, seed: int) -> float:
    """The best accuracy any model can reach on this split: the share of labels that were not flipped."""
    rows = reviews(size, seed)
    return sum(label == truth for _, label, truth in rows) / len(rows)
