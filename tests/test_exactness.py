"""Exactness: speculative decoding samples from the target's distribution, not the draft's.

With a vocabulary of 8 tokens the target's exact joint distribution of the first two generated
tokens (64 outcomes) is computed by brute force, and thousands of speculative runs (fixed seeds,
so the test is deterministic) are compared with it by a chi-square test, as vLLM's
`test_rejection_sampling_approximates_target_distribution` does. The draft disagrees with the
target often, so accepted, corrected and bonus tokens all occur. A control run of the draft
alone is rejected by the same test, which shows the test has the power to fail.

The other proposers get the same test on the joint of the first three tokens (K = 2, so
rejections at either draft, the corrected token and the bonus all fall inside the window): an
untrained feature head whose vocabulary is trimmed, so some tokens come only from the residual,
and prompt lookup (alone, and merged with the feature head) on a prompt whose last n-gram occurred
before. Their control is the classic
bug of sampling a rejected position from p instead of the residual: the same samples reject
the first-token law that bug would produce.

Exactness is relative to the model as run: the same pair rounded to bfloat16 follows the bfloat16
target's own exact law (draft model and feature head), with the same control.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import pytest
import torch

# One scipy-free chi-square (checked against scipy in test_cuda.py), one exact law by enumeration and
# one seeded sampler, shared with the CUDA checks.
from cuda_checks import EXACT_PROMPT, VOCAB, chi_square, exact_joint, on_device, seeded_windows
from engine_helpers import make_pair

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.autoregressive import AutoregressiveDecoder

PROMPT = EXACT_PROMPT
RUNS = 3000
HEAD_VOCAB = (0, 1, 2, 5, 6, 7)  # the feature head scores only these; 3 (p_1 = 0.26) and 4 it never proposes
OUTSIDE = tuple(t for t in range(VOCAB) if t not in HEAD_VOCAB)
LOOKUP_PROMPT = [1, 5, 2, 7, 0, 0, 0, 1, 5, 2, 7]  # its last 3-gram occurred at 1: lookup proposes 0, 0
WINDOW = 3
PROPOSER_RUNS = 2000


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3, head_vocab=HEAD_VOCAB)


def marginal(joint: dict[tuple[int, ...], float], position: int) -> dict[int, float]:
    """P(x_position = t) for every t (0-based position within the joint's tuples)."""
    out = dict.fromkeys(range(VOCAB), 0.0)
    for outcome, prob in joint.items():
        out[outcome[position]] += prob
    return out


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
    for n, (dec, traces) in enumerate(seeded_windows(pair, cfg, PROMPT, RUNS), start=1):
        kinds.update(t.kind for tr in traces for t in tr.emitted)
        counts[tuple(dec.committed[len(PROMPT) : len(PROMPT) + 2])] += 1
        if n in (RUNS // 8, RUNS):
            tv_at[n] = total_variation(counts, expected, n)
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


# --------------------------------------------------------------------------- other proposers


@dataclass
class ProposerRuns:
    """PROPOSER_RUNS seeded runs of one proposer: what the first WINDOW tokens were, how they
    were made, what was ever drafted, and q_1 (the proposer's distribution for x1)."""

    expected: dict[tuple[int, ...], float]
    counts: collections.Counter
    kinds: collections.Counter
    drafted: set[int]
    first_q: list[float]
    sources: collections.Counter  # a merged proposer's: drafts per source


def sample_proposer(pair, cfg: DecodeConfig, prompt: list[int]) -> ProposerRuns:
    probe = SpeculativeDecoder(pair, cfg.replace(instrument=True, top_n=VOCAB))
    probe.start(prompt)
    first_q = [0.0] * VOCAB
    for entry in probe.step().drafts[0].draft_top:
        first_q[entry.token_id] = entry.prob
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    drafted: set[int] = set()
    sources: collections.Counter = collections.Counter()
    window = slice(len(prompt), len(prompt) + WINDOW)
    for dec, traces in seeded_windows(pair, cfg, prompt, PROPOSER_RUNS, WINDOW):
        drafted.update(d.token_id for tr in traces for d in tr.drafts)
        sources.update(d.source for tr in traces for d in tr.drafts)
        counts[tuple(dec.committed[window])] += 1
        kinds.update(dec.origins[window])
    return ProposerRuns(exact_joint(pair.target, cfg, prompt, WINDOW), counts, kinds, drafted, first_q, sources)


@pytest.fixture(scope="module")
def feature_runs(pair):
    cfg = DecodeConfig(k=2, proposer="feature", page_size=2, instrument=False, max_new_tokens=16)
    return sample_proposer(pair, cfg, PROMPT)


@pytest.fixture(scope="module")
def lookup_runs(pair):
    cfg = DecodeConfig(k=2, proposer="lookup", cache_layout="contiguous", instrument=False, max_new_tokens=16)
    return sample_proposer(pair, cfg, LOOKUP_PROMPT)


@pytest.fixture(scope="module")
def feature_lookup_runs(pair):
    """The merged proposer: lookup copies after the prompt's repeated 3-gram, the head drafts
    wherever the sampled text has no earlier 2-gram -- both sources inside the window."""
    cfg = DecodeConfig(k=2, proposer="feature+lookup", page_size=2, instrument=False, max_new_tokens=16)
    return sample_proposer(pair, cfg, LOOKUP_PROMPT)


def residual_is_p_law(p: dict[int, float], q: list[float]) -> dict[int, float]:
    """The law of x1 if a rejected position were resampled from p instead of norm(max(0, p - q)):
    min(p, q) + (1 - sum min(p, q)) p. It differs from p wherever q does."""
    overlap = sum(min(p[t], q[t]) for t in range(VOCAB))
    return {t: min(p[t], q[t]) + (1 - overlap) * p[t] for t in range(VOCAB)}


@pytest.mark.parametrize("runs_name", ["feature_runs", "lookup_runs", "feature_lookup_runs"])
def test_proposer_samples_match_the_target_distribution(request, runs_name):
    runs: ProposerRuns = request.getfixturevalue(runs_name)
    stat, pvalue = chi_square(runs.counts, runs.expected, PROPOSER_RUNS)
    print(f"\n{runs_name}: chi2={stat:.2f} p={pvalue:.4f} kinds={dict(runs.kinds)}")
    assert min(runs.kinds["accepted"], runs.kinds["corrected"], runs.kinds["bonus"]) >= 50, runs.kinds
    assert pvalue > 0.01, (stat, pvalue)
    # Control: the same samples reject what the residual-is-p bug would have produced for x1.
    first = collections.Counter(outcome[0] for outcome in runs.counts.elements())
    p_first = marginal(runs.expected, 0)
    assert chi_square(first, p_first, PROPOSER_RUNS)[1] > 0.01
    assert chi_square(first, residual_is_p_law(p_first, runs.first_q), PROPOSER_RUNS)[1] < 1e-6
    if runs_name == "feature_lookup_runs":  # both of the merged proposer's sources were tested
        assert min(runs.sources["prompt lookup"], runs.sources["feature head"]) >= 200, runs.sources


def test_tokens_outside_the_head_vocabulary_keep_their_target_probability(feature_runs):
    """The trimmed head gives q = 0 to 3 and 4: they are never drafted, yet every position of the
    window emits them with their exact target probability (the residual max(0, p - q) gives
    them back their full p)."""
    runs = feature_runs
    assert all(runs.first_q[t] == 0.0 for t in OUTSIDE) and sum(runs.first_q) == pytest.approx(1.0)
    assert runs.drafted and not runs.drafted & set(OUTSIDE), runs.drafted
    n = PROPOSER_RUNS
    assert marginal(runs.expected, 0)[3] > 0.2  # a token the target likes, so the check is sharp
    for position in range(WINDOW):
        exact = marginal(runs.expected, position)
        seen = collections.Counter(outcome[position] for outcome in runs.counts.elements())
        for token in OUTSIDE:
            p = exact[token]
            tolerance = 4.5 * math.sqrt(p * (1 - p) / n) + 1 / n
            assert abs(seen[token] / n - p) < tolerance, (position, token, seen[token] / n, p)


# --------------------------------------------------------------------------- bfloat16


@pytest.mark.parametrize(("proposer", "k"), [("draft", 3), ("feature", 1)])  # the untrained head: K=1 gets bonuses
def test_bfloat16_samples_match_the_bfloat16_target_distribution(proposer, k):
    """Exactness is relative to the model as run: in bfloat16 the first two tokens follow the
    bfloat16 target's exact joint law (brute force through the same rounded weights), and the
    same samples reject the draft's law (the control that shows the test's power)."""
    pair = on_device(make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3, head_vocab=HEAD_VOCAB), "cpu",
                     torch.bfloat16, head_vocab=HEAD_VOCAB, seed=3)
    assert next(pair.target.parameters()).dtype == torch.bfloat16
    runs = RUNS // 3
    cfg = DecodeConfig(k=k, proposer=proposer, temperature=1.0, page_size=2, instrument=False, max_new_tokens=16)
    expected = exact_joint(pair.target, cfg)
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    for dec, traces in seeded_windows(pair, cfg, PROMPT, runs):
        assert traces[0].dtype == "bfloat16"
        kinds.update(t.kind for tr in traces for t in tr.emitted)
        counts[tuple(dec.committed[len(PROMPT) : len(PROMPT) + 2])] += 1
    stat, pvalue = chi_square(counts, expected, runs)
    print(f"\nbfloat16 {proposer}: chi2={stat:.2f} p={pvalue:.4f} kinds={dict(kinds)}")
    assert min(kinds["accepted"], kinds["corrected"], kinds["bonus"]) >= 50, kinds
    assert pvalue > 0.01, (stat, pvalue)
    assert chi_square(counts, exact_joint(pair.draft, cfg), runs)[1] < 1e-4
