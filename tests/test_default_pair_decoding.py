"""Speculative decoding on the embedded default pair (SmolLM2-135M-Instruct + distilled draft):
greedy output equals the target's own greedy generate, both caches stay exact, and sampling runs.

Also in bfloat16, where exactness is relative to the model as run: every greedy token is the
bfloat16 target's own choice (up to its near-ties, where a verify pass over K+1 tokens rounds
differently from a one-token step), and the invariant holds within bfloat16's tolerance."""

from __future__ import annotations

import pytest
import torch

from specviz import DecodeConfig, SpeculativeDecoder, load_default_pair, precision
from specviz.cli import encode_prompt
from specviz.runtime import max_abs_kv_diff

BF16_NEAR_TIE = 0.5  # logits of ~20: bfloat16 steps of 0.125, a few of them between two pass shapes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair(monkeypatch_module):
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(2)  # a 135M model does gain from both cores
    yield load_default_pair()
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize(("proposer", "layout", "k"), [
    ("draft", "paged", 4), ("draft", "contiguous", 6), ("feature", "paged", 4), ("feature", "contiguous", 2),
    ("lookup", "paged", 3),
])
def test_greedy_speculative_equals_target_greedy_generate(pair, proposer, layout, k):
    prompt = encode_prompt(pair.tokenizer, "What is the capital of France?")
    new = 24
    with torch.inference_mode():
        reference = pair.target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new)[0].tolist()
    dec = SpeculativeDecoder(pair, DecodeConfig(k=k, proposer=proposer, temperature=0, cache_layout=layout,
                                                page_size=16, max_new_tokens=new, check_invariant=True))
    dec.start(prompt)
    traces = []
    while not dec.finished:
        traces.append(dec.step())
    assert dec.committed == reference
    assert max(max(t.invariant_max_abs_diff.values()) for t in traces) < precision.invariant_tolerance("float32")
    if proposer != "lookup":  # the learned proposers are useful: on average more than one token per cycle
        assert len(reference) - len(prompt) > len(traces)


def test_the_shipped_feature_head_is_attached_and_trained(pair):
    head = pair.feature_head
    assert head is not None and head.info["trained"] and head.info["steps"] > 0
    assert head.output_weight.shape[0] < pair.target.config.vocab_size  # a trimmed vocabulary
    assert pair.tokenizer.eos_token_id in head.vocab.tolist()  # it can propose the end of the text


@pytest.fixture(scope="module")
def pair_bf16(monkeypatch_module):
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(2)
    yield load_default_pair(dtype="bfloat16")
    torch.set_num_threads(1)


@pytest.mark.parametrize(("proposer", "layout", "k"), [("draft", "paged", 4), ("feature", "contiguous", 3)])
def test_bfloat16_greedy_is_the_bfloat16_targets_own_choice(pair_bf16, proposer, layout, k):
    pair = pair_bf16
    assert {p.dtype for p in pair.target.parameters()} == {torch.bfloat16} == {p.dtype for p in pair.draft.parameters()}
    prompt = encode_prompt(pair.tokenizer, "Give me three tips for learning to cook.")
    new = 24
    with torch.inference_mode():
        reference = pair.target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new)[0].tolist()
    dec = SpeculativeDecoder(pair, DecodeConfig(k=k, proposer=proposer, temperature=0, cache_layout=layout,
                                                page_size=16, max_new_tokens=new, check_invariant=True))
    dec.start(prompt)
    traces = []
    while not dec.finished:
        traces.append(dec.step())
    assert {t.dtype for t in traces} == {"bfloat16"}
    committed = dec.committed
    with torch.inference_mode():  # the bfloat16 target's logits at every generated position, in one pass
        rows = pair.target(torch.tensor([committed])).logits[0, len(prompt) - 1 : -1].float()
    chosen = torch.tensor(committed[len(prompt) :])
    gaps = rows.max(-1).values - rows.gather(1, chosen[:, None])[:, 0]
    print(f"\n{proposer}: equal to generate {committed == reference}, worst gap {gaps.max():.3f}")
    assert gaps.max() <= BF16_NEAR_TIE, gaps  # a wrong token sits whole logits below the top
    same = next((i for i, (a, b) in enumerate(zip(committed, reference, strict=False)) if a != b), None)
    if same is not None:  # where the texts part, generate's token was a near-tie of ours
        gap = rows[same - len(prompt), reference[same]] - rows[same - len(prompt), committed[same]]
        assert abs(gap) <= BF16_NEAR_TIE, (same, gap)
    assert max(max(t.invariant_max_abs_diff.values()) for t in traces) <= precision.invariant_tolerance("bfloat16")
    # Power: the target cache against the committed text with one token changed is far off.
    wrong = committed[: dec.target_cache.get_seq_length()]
    wrong[len(prompt) + 2] += 1
    assert max_abs_kv_diff(pair.target, dec.target_cache, wrong) > 3 * precision.invariant_tolerance("bfloat16")


@pytest.mark.parametrize("proposer", ["draft", "feature"])
def test_sampling_cycles_keep_both_caches_exact(pair, proposer):
    prompt = encode_prompt(pair.tokenizer, "Give me three tips for learning to cook.")
    dec = SpeculativeDecoder(pair, DecodeConfig(k=5, proposer=proposer, temperature=1.0, page_size=4,
                                                free_policy="keep", check_invariant=True, max_new_tokens=40))
    dec.start(prompt)
    for _ in range(4):
        trace = dec.step()
        assert max(trace.invariant_max_abs_diff.values()) < precision.invariant_tolerance("float32")
        assert all(d.text for d in trace.drafts)  # real token texts from the tokenizer
    assert dec.target_cache.get_seq_length() == len(dec.committed) - 1
