"""Exactness: speculative decoding samples from the target's distribution, not the draft's.

With a vocabulary of 8 tokens the target's exact joint distribution of the first two generated
tokens (64 outcomes) is computed by brute force, and thousands of speculative runs (fixed seeds,
so the test is deterministic) are compared with it by a chi-square test, as vLLM's
`test_rejection_sampling_approximates_target_distribution` does. The draft disagrees with the
target often, so accepted, corrected and bonus tokens all occur. A control run of the draft
alone is rejected by the same test, which shows the test has the power to fail.
"""

from __future__ import annotations

import collections
import itertools

import pytest
import torch
from engine_helpers import make_pair
from scipy.stats import chisquare

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.autoregressive import AutoregressiveDecoder
from specviz.sampling import process_logits

VOCAB = 8
PROMPT = [1, 5, 2, 7]
RUNS = 3000


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3)


@torch.inference_mode()
def exact_joint(model, cfg: DecodeConfig) -> dict[tuple[int, int], float]:
    """P(x1, x2 | prompt) under the target's processed distribution, by enumeration."""
    def probs(ids):
        logits = model(torch.tensor([ids])).logits[0, -1]
        return process_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)

    first = probs(PROMPT)
    return {
        (a, b): float(first[a]) * float(probs([*PROMPT, a])[b])
        for a, b in itertools.product(range(VOCAB), repeat=2)
    }


def first_two(dec) -> tuple[int, int]:
    dec.start(PROMPT)
    while len(dec.committed) < len(PROMPT) + 2:
        dec.step()
    return tuple(dec.committed[len(PROMPT) : len(PROMPT) + 2])


def chi_square(counts: collections.Counter, expected: dict[tuple[int, int], float], n: int) -> tuple[float, float]:
    """Chi-square statistic and p-value; outcomes expected fewer than 5 times are pooled."""
    observed, wanted, pool_obs, pool_exp = [], [], 0, 0.0
    for outcome, prob in expected.items():
        if prob * n >= 5:
            observed.append(counts[outcome])
            wanted.append(prob * n)
        else:
            pool_obs += counts[outcome]
            pool_exp += prob * n
    observed.append(pool_obs)
    wanted.append(pool_exp)
    total = sum(wanted)
    result = chisquare(observed, [w * sum(observed) / total for w in wanted])
    return float(result.statistic), float(result.pvalue)


def total_variation(counts: collections.Counter, expected: dict, n: int) -> float:
    return 0.5 * sum(abs(counts[o] / n - p) for o, p in expected.items())


@pytest.mark.parametrize(
    ("k", "temperature", "top_k", "layout"),
    [(3, 1.0, 0, "paged"), (1, 0.8, 5, "contiguous")],
)
def test_speculative_samples_match_the_target_distribution(pair, k, temperature, top_k, layout):
    cfg = DecodeConfig(k=k, temperature=temperature, top_k=top_k, cache_layout=layout, page_size=2,
                       instrument=False, max_new_tokens=16)
    expected = exact_joint(pair.target, cfg)
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    tv_at = {}
    for seed in range(RUNS):
        dec = SpeculativeDecoder(pair, cfg.replace(seed=seed))
        dec.start(PROMPT)
        while len(dec.committed) < len(PROMPT) + 2:
            kinds.update(t.kind for t in dec.step().emitted)
        counts[tuple(dec.committed[len(PROMPT) : len(PROMPT) + 2])] += 1
        if seed + 1 in (RUNS // 8, RUNS):
            tv_at[seed + 1] = total_variation(counts, expected, seed + 1)
    stat, pvalue = chi_square(counts, expected, RUNS)
    print(f"\nK={k} T={temperature} top_k={top_k}: chi2={stat:.2f} p={pvalue:.4f} TV={tv_at} kinds={dict(kinds)}")
    assert min(kinds["accepted"], kinds["corrected"], kinds["bonus"]) >= 100, kinds
    assert pvalue > 0.01, (stat, pvalue)
    assert tv_at[RUNS] < tv_at[RUNS // 8]  # the empirical distribution converges as N grows


def test_the_draft_alone_fails_the_same_test(pair):
    """Control: the draft's own distribution differs from the target's, and the test sees it."""
    cfg = DecodeConfig(temperature=1.0, instrument=False)
    expected = exact_joint(pair.target, cfg)
    counts: collections.Counter = collections.Counter()
    runs = RUNS // 3
    for seed in range(runs):
        dec = AutoregressiveDecoder(pair.draft, cfg.replace(seed=seed, max_new_tokens=2))
        dec.start(PROMPT)
        counts[tuple(dec.generate())] += 1
    _, pvalue = chi_square(counts, expected, runs)
    assert pvalue < 1e-6
