"""Every proposer (draft model, feature head, prompt lookup) keeps decoding exact.

Whoever proposes the drafts, the target's verify / accept / resolve / rollback never change
(docs/design.md §1b), so for each proposer: greedy decoding equals the target's own `generate`; the
target's cache, and the proposer's own cache where it has one, equal a fresh prefill after every
cycle; bad input is a clear error that leaves the decoder as it was. Exactness by chi-square for
the feature head and prompt lookup is in test_exactness.py; loading heads from disk in
test_models.py.
"""

from __future__ import annotations

import collections
import functools
import json

import pytest
import torch
from engine_helpers import LAYOUT_CASES, TOL, assert_invariant, make_pair

from specviz import DecodeConfig, FeatureHead, ModelPair, SpeculativeDecoder
from specviz.errors import ConfigError, IncompatiblePairError, PoolExhaustedError
from specviz.models import attach_feature_head
from specviz.proposers import LookupProposer, find_continuation, registry
from specviz.runtime import open_cache_with_features
from specviz.trace import CYCLE_PHASES, CycleTrace

PROMPT = [3, 17, 42, 5, 9, 28, 11]
NEW = 24


@functools.cache
def greedy_reference(arch: str) -> tuple[int, ...]:
    """The target's own greedy `generate` continuation of PROMPT (NEW tokens)."""
    target = make_pair(arch).target
    out = target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW)
    return tuple(out[0].tolist())


@functools.cache
def greedy_pair(arch: str):
    """make_pair(arch) whose feature head is trimmed to the tokens of the greedy continuation, so
    that even an untrained head sometimes proposes the target's choice (accepted drafts occur)."""
    pair = make_pair(arch)
    vocab = sorted(set(greedy_reference(arch)[len(PROMPT) :]))
    return attach_feature_head(pair, FeatureHead.random(pair.target, vocab=vocab))


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama")


def datastore_text(pair, n: int) -> list[int]:
    """The first n tokens of the pair's retrieval datastore: a context retrieval finds there."""
    return [int(t) for t in pair.retrieval_store.tokens[:n]]


def prompt_for(proposer: str, pair, repeating: list[int], plain: list[int]) -> list[int]:
    """A prompt this proposer drafts from: text that repeats itself for prompt lookup, the
    datastore's own text for retrieval, `plain` for the model-based proposers."""
    if proposer == "lookup":
        return repeating
    return datastore_text(pair, len(plain)) if proposer == "retrieval" else plain


@pytest.fixture(scope="module")
def repeating_prompt(pair) -> list[int]:
    """PROMPT and the target's greedy continuation of it: text that repeats itself, so prompt
    lookup finds earlier n-grams and the target (peaked, sampled at T=1) often agrees with them."""
    return list(greedy_reference("llama")[: len(PROMPT) + 16])


def fresh_features(decoder: SpeculativeDecoder) -> torch.Tensor:
    """The target's features of committed[:-1] from a fresh prefill (the reference for what a
    feature proposer keeps from the prefill and its verify passes)."""
    cfg = decoder.config.replace(cache_layout="contiguous")
    return open_cache_with_features(decoder.target, cfg, decoder.max_context, decoder.committed)[1]


def state(decoder: SpeculativeDecoder) -> tuple:
    """What a failed call must not change: tokens, cache lengths and block tables, the random
    streams, and a feature proposer's kept features and count of real entries. (The free pool is
    compared as a set: undoing a provisional append returns its blocks to the tail of the free
    queue, exactly as a rejected draft's rollback does, so their order may rotate.)"""
    n = len(decoder.committed)
    caches = [c for c in (decoder.target_cache, decoder.draft_cache) if c is not None]
    snaps = [(c.get_seq_length(), c.snapshot(n).block_table, sorted(c.snapshot(n).free_blocks)) for c in caches]
    gens = [g.get_state().tolist() for g in decoder._session.generators.values()]
    proposer = decoder.proposer
    extra = ()
    if proposer.name == "feature":
        extra = (proposer.num_real, proposer.features.tolist(), proposer.verify_features)
    return decoder.committed, decoder.origins, snaps, gens, extra


# --------------------------------------------------------------------------- greedy equality


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("proposer", registry.names())
@pytest.mark.parametrize(("layout", "k"), [("paged", 1), ("paged", 4), ("contiguous", 3)])
def test_greedy_equals_target_generate(arch, proposer, layout, k):
    dec = SpeculativeDecoder(greedy_pair(arch), DecodeConfig(k=k, proposer=proposer, temperature=0,
                                                             cache_layout=layout, page_size=3, max_new_tokens=NEW))
    dec.start(PROMPT)
    kinds: collections.Counter = collections.Counter()
    while not dec.finished:
        trace = dec.step()
        assert trace.proposer == proposer
        kinds.update(t.kind for t in trace.emitted)
    assert dec.committed == list(greedy_reference(arch))
    assert kinds["accepted"] > 0, kinds  # the proposals were used, not only corrected away
    assert_invariant(dec)


# --------------------------------------------------------------------------- cache invariant


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize(("layout", "page_size", "policy"), LAYOUT_CASES)
def test_feature_head_invariant_after_every_cycle(pair, k, layout, page_size, policy):
    """The head's cache equals a fresh head prefill over fresh target features after every cycle,
    it lags by exactly the tokens the last cycle committed, and its kept features are the
    target's real ones. (The draft model's proposer: test_engine.py.)"""
    cfg = DecodeConfig(k=k, proposer="feature", temperature=1.0, seed=k, cache_layout=layout,
                       page_size=page_size, free_policy=policy, max_new_tokens=120, check_invariant=True)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    assert dec.draft_cache.get_seq_length() == len(PROMPT) - 2  # the last real pair waits for catch-up
    assert_invariant(dec)
    endings: collections.Counter = collections.Counter()
    previous = None
    for _ in range(10):
        trace = dec.step()
        n = len(dec.committed)
        endings[trace.emitted[-1].kind] += 1
        assert trace.k == k and max(trace.invariant_max_abs_diff.values()) < TOL, trace.invariant_max_abs_diff
        assert_invariant(dec)
        # rolled back to the entries built from real features: the lag is what this cycle committed
        assert dec.draft_cache.get_seq_length() == trace.context_len - 1
        # catch-up fed the pairs of the tokens the previous cycle committed (the prompt's last at first)
        first = len(PROMPT) - 1 if previous is None else previous.context_len
        assert [t.position for t in trace.catch_up] == list(range(first, trace.context_len))
        assert torch.allclose(dec.proposer.features, fresh_features(dec), atol=TOL)
        assert dec.proposer.features.shape[0] == n - 1
        previous = trace
    assert endings["corrected"] > 0, endings
    if k == 1:  # an untrained head is accepted often enough for single drafts only
        assert endings["bonus"] > 0, endings


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize(("layout", "page_size", "policy"), LAYOUT_CASES)
def test_lookup_invariant_after_every_cycle(pair, repeating_prompt, k, layout, page_size, policy):
    """Prompt lookup has no cache: only the target's is checked, on cycles with and without a match."""
    cfg = DecodeConfig(k=k, proposer="lookup", temperature=1.0, seed=k, cache_layout=layout,
                       page_size=page_size, free_policy=policy, max_new_tokens=40, check_invariant=True)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(repeating_prompt)
    assert dec.draft_cache is None
    kinds: collections.Counter = collections.Counter()
    sizes = []
    for _ in range(12):
        trace = dec.step()
        assert set(trace.invariant_max_abs_diff) == {"target"}
        assert trace.invariant_max_abs_diff["target"] < TOL
        assert_invariant(dec)
        assert trace.draft_events == () and trace.catch_up == ()
        assert all(d.draft_prob == 1.0 for d in trace.drafts)  # q is one-hot on the looked-up token
        kinds.update(t.kind for t in trace.emitted)
        sizes.append(trace.k)
    assert min(sizes) == 0 and max(sizes) > 0, sizes  # matched and unmatched cycles both occurred
    assert kinds["accepted"] > 0 and kinds["corrected"] > 0 and kinds["generated"] > 0, kinds


def test_feature_fork_continues_identically(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, proposer="feature", page_size=3, max_new_tokens=40))
    dec.start(PROMPT)
    dec.step()
    twin = dec.fork()
    twin_emitted = [twin.step().emitted for _ in range(3)]
    assert_invariant(twin)
    assert dec.draft_cache.get_seq_length() < twin.draft_cache.get_seq_length()  # the original did not move
    assert [dec.step().emitted for _ in range(3)] == twin_emitted
    assert_invariant(dec)


# --------------------------------------------------------------------------- one-token prompts, clamped K


@pytest.mark.parametrize("proposer", ["lookup", "feature"])
def test_one_token_prompt_starts_with_a_plain_target_step(pair, proposer):
    """Nothing to look up and no target feature yet: the first cycle proposes nothing (k == 0)
    and emits one "generated" token; the trace is complete and round-trips through JSON."""
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, proposer=proposer, max_new_tokens=20, check_invariant=True))
    dec.start([5])
    trace = dec.step()
    assert trace.k == 0 and trace.drafts == () and trace.num_accepted == 0 and trace.rejected_at is None
    assert [t.kind for t in trace.emitted] == ["generated"] and trace.bonus_top and not trace.residual_top
    assert dec.committed == [5, trace.emitted[0].token_id] and dec.origins == ["prompt", "generated"]
    assert [s.phase for s in trace.snapshots] == list(CYCLE_PHASES)
    assert trace.snapshot("verify").target.seq_len == 1  # verify ran over [x_1] alone
    assert trace.proposer_note
    assert CycleTrace.from_dict(json.loads(json.dumps(trace.to_dict()))) == trace
    assert_invariant(dec)
    if proposer == "feature":
        assert dec.draft_cache.get_seq_length() == 0 and trace.snapshot("rollback").draft is not None
        second = dec.step()  # the plain step produced F[0]: the head drafts from it now
        assert second.k == 3 and [t.position for t in second.catch_up] == [1]
    else:
        assert trace.snapshot("rollback").draft is None
        second = dec.step()
    assert_invariant(dec)
    assert dec.committed[:2] == [5, trace.emitted[0].token_id] and len(dec.committed) > 2


@pytest.mark.parametrize("proposer", registry.names())
def test_k_is_clamped_to_the_room_left(pair, repeating_prompt, proposer):
    """K = 8 with 3 positions left in the context: the cycle drafts 3 (lookup: at most 3), verify
    fills the context exactly, and the sequence ends there with every cache still exact."""
    prompt = prompt_for(proposer, pair, repeating_prompt, PROMPT)
    cfg = DecodeConfig(k=8, proposer=proposer, max_context=len(prompt) + 3, check_invariant=True)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(prompt)
    trace = dec.step()
    if proposer == "lookup":
        assert 1 <= trace.k <= 3
    else:
        assert trace.k == 3
    assert trace.snapshot("verify").target.seq_len == len(prompt) + trace.k <= dec.max_context
    while not dec.finished:
        dec.step()
    assert dec.finish_reason == "context_full" and len(dec.committed) == dec.max_context
    assert_invariant(dec)


@pytest.mark.parametrize("proposer", registry.names())
def test_k_is_clamped_to_the_tokens_left(pair, repeating_prompt, proposer):
    """K = 8 with 2 new tokens allowed: one draft, and exactly 2 tokens committed."""
    prompt = prompt_for(proposer, pair, repeating_prompt, PROMPT)
    dec = SpeculativeDecoder(pair, DecodeConfig(k=8, proposer=proposer, max_new_tokens=2))
    dec.start(prompt)
    trace = dec.step()
    assert trace.k <= 1 and (proposer == "lookup" or trace.k == 1)
    dec.generate()
    assert len(dec.committed) == len(prompt) + 2 and dec.finish_reason == "max_new_tokens"
    assert_invariant(dec)


# --------------------------------------------------------------------------- bad input


def test_feature_proposer_needs_a_head(pair):
    headless = ModelPair(target=pair.target, draft=pair.draft, tokenizer=None)
    dec = SpeculativeDecoder(headless, DecodeConfig(proposer="feature"))
    with pytest.raises(ConfigError, match="feature head"):
        dec.start(PROMPT)
    assert not dec.started
    nodraft = ModelPair(target=pair.target, draft=None, tokenizer=None)
    with pytest.raises(ConfigError, match="draft model"):
        SpeculativeDecoder(nodraft, DecodeConfig(proposer="draft")).start(PROMPT)
    lookup = SpeculativeDecoder(nodraft, DecodeConfig(proposer="lookup", max_new_tokens=3))
    lookup.start(PROMPT)  # lookup needs neither a draft nor a head
    lookup.generate()
    assert len(lookup.committed) == len(PROMPT) + 3
    with pytest.raises(ConfigError, match="proposer"):
        DecodeConfig(proposer="medusa")
    with pytest.raises(ConfigError, match="proposer"):  # the proposer shapes the caches: no live change
        lookup.update_config(lookup.config.replace(proposer="draft"))


@pytest.mark.parametrize("other_arch", ["llama", "gpt2"])
def test_head_made_for_another_target_is_refused(pair, other_arch):
    """A head fitted to another model (same family with other weights, or another family) is refused
    when bound, and the failed bind leaves the head working for its own target."""
    other = make_pair(other_arch, seed=1).target
    head = pair.feature_head
    features, ids = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0)), torch.tensor([[1, 2, 3, 4]])
    before = head.full_logits(head(features, ids))
    why = "embedding weights differ" if other_arch == "llama" else "model_type"
    with pytest.raises(IncompatiblePairError, match=why):
        head.bind(other)
    with pytest.raises(IncompatiblePairError, match="another target"):
        attach_feature_head(make_pair(other_arch, seed=1), head)
    with pytest.raises(IncompatiblePairError, match="another target"):
        FeatureHead.random(other).bind(pair.target)
    assert torch.equal(head.full_logits(head(features, ids)), before)
    assert head._target[1] is pair.target.get_output_embeddings()


@pytest.mark.parametrize("proposer", registry.names())
@pytest.mark.parametrize("k", [5, 8])
def test_pool_exhaustion_inside_step_changes_nothing(pair, proposer, k):
    """3 blocks of 4 slots hold a 9-token prompt but not K drafts. With K = 5 the feature head
    drafts fine and the target's verify fails; with K = 8 the head's own pool runs out while
    drafting. Either way the error leaves every state as it was, and after lowering K the next
    cycle is exactly the one a decoder that never failed would run."""
    cfg = DecodeConfig(k=k, proposer=proposer, page_size=4, num_blocks=3)
    # 9 tokens: lookup matches the 2-gram and proposes 5 tokens; retrieval finds them in its datastore
    prompt = prompt_for(proposer, pair, PROMPT + PROMPT[:2], PROMPT + PROMPT[:2])
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(prompt)
    before = state(dec)
    with pytest.raises(PoolExhaustedError, match="block"):
        dec.step()
    assert state(dec) == before
    assert dec.proposer.drain_events() == [] and dec.target_cache.drain_events() == []
    dec.update_config(cfg.replace(k=1))
    twin = SpeculativeDecoder(pair, cfg.replace(k=1))
    twin.start(prompt)
    assert dec.step().emitted == twin.step().emitted
    assert dec.committed == twin.committed
    assert_invariant(dec)


@pytest.mark.parametrize("proposer", registry.names())
def test_error_after_verify_changes_nothing(pair, proposer, monkeypatch):
    """A failure after the target's verify pass (here: inside resolve) undoes the provisional
    K/V, the head's drafted entries and the verify features it was handed."""
    cfg = DecodeConfig(k=3, proposer=proposer, page_size=3, max_new_tokens=40)
    prompt = PROMPT + PROMPT[:2]
    dec, twin = SpeculativeDecoder(pair, cfg), SpeculativeDecoder(pair, cfg)
    for d in (dec, twin):
        d.start(prompt)
        d.step()
    before = state(dec)

    def broken(*args, **kwargs):
        raise RuntimeError("injected failure in resolve")

    monkeypatch.setattr(dec, "_resolve", broken)
    with pytest.raises(RuntimeError, match="injected"):
        dec.step()
    assert state(dec) == before
    monkeypatch.undo()
    assert [dec.step().emitted for _ in range(2)] == [twin.step().emitted for _ in range(2)]
    assert_invariant(dec)


# --------------------------------------------------------------------------- feature head files


@pytest.mark.parametrize("vocab", [None, [0, 3, 5, 9, 40]])
def test_feature_head_save_load_round_trip(tiny_lm, tmp_path, vocab):
    """Saved (float16 weights) and loaded back, a head gives the same logits up to float16
    rounding, and a second round trip is lossless; the trimmed vocabulary survives."""
    head = FeatureHead.random(tiny_lm, seed=2, vocab=vocab)
    loaded = FeatureHead.load(head.save(tmp_path / "a"), tiny_lm)
    again = FeatureHead.load(loaded.save(tmp_path / "b"), tiny_lm)
    hidden = tiny_lm.get_input_embeddings().weight.shape[1]
    features = torch.randn(1, 5, hidden, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        want, got, got_again = (h.full_logits(h(features, ids)) for h in (head, loaded, again))
    assert got.shape == (1, 5, tiny_lm.config.vocab_size)
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got))
    assert finite.sum() == 5 * (tiny_lm.config.vocab_size if vocab is None else len(vocab))
    assert torch.allclose(want[finite], got[finite], atol=1e-2, rtol=1e-2)
    assert torch.equal(got, got_again)
    assert loaded.output_weight.shape == head.output_weight.shape and loaded.info == head.info
    assert (loaded.vocab is None) == (vocab is None)
    if vocab is not None:
        assert loaded.vocab.tolist() == sorted(vocab)


# --------------------------------------------------------------------------- prompt lookup


def test_find_continuation_prefers_the_longest_ngram():
    # the 1-gram [4] last occurred at 5 (followed by 6), but the 3-gram [2, 3, 4] occurred at 1
    tokens = [9, 2, 3, 4, 7, 4, 6, 2, 3, 4]
    assert find_continuation(tokens, 3, max_ngram=3, min_ngram=1) == ([7, 4, 6], 3, 1)
    assert find_continuation(tokens, 3, max_ngram=1, min_ngram=1) == ([6, 2, 3], 1, 5)


def test_find_continuation_takes_the_most_recent_occurrence():
    tokens = [1, 2, 8, 1, 2, 9, 5, 1, 2]
    assert find_continuation(tokens, 2, max_ngram=2, min_ngram=1) == ([9, 5], 2, 3)


def test_find_continuation_never_matches_the_suffix_itself():
    assert find_continuation([4, 5, 6], 3, max_ngram=3, min_ngram=1) == ([], 0, -1)
    assert find_continuation([7], 3, max_ngram=3, min_ngram=1) == ([], 0, -1)
    # overlapping occurrences are fine: [7, 7] at 0 is earlier than the suffix at 1
    assert find_continuation([7, 7, 7], 3, max_ngram=3, min_ngram=1) == ([7], 2, 0)


def test_find_continuation_limits_and_no_match():
    tokens = [1, 2, 3, 4, 5, 6, 1]
    assert find_continuation(tokens, 2, max_ngram=3, min_ngram=1) == ([2, 3], 1, 0)  # at most k
    assert find_continuation([1, 2, 1], 5, max_ngram=3, min_ngram=1) == ([2, 1], 1, 0)  # up to the end
    assert find_continuation(tokens, 2, max_ngram=3, min_ngram=2) == ([], 0, -1)  # 1-grams not allowed
    assert find_continuation([1, 2, 3], 2, max_ngram=3, min_ngram=1) == ([], 0, -1)


def test_lookup_proposer_reports_one_hot_q():
    proposer = LookupProposer(vocab_size=12, device=torch.device("cpu"), max_ngram=2)

    def never(_logits):
        raise AssertionError("lookup must not process logits")

    drafts = proposer.propose([1, 2, 8, 1, 2], 3, never, False, torch.Generator())
    assert drafts.tokens == [8, 1, 2] and drafts.catch_up_positions == []
    for token, q in zip(drafts.tokens, drafts.probs):
        assert q.shape == (12,) and q[token] == 1.0 and q.sum() == 1.0
    assert "positions 0..1" in drafts.note
    empty = proposer.propose([1, 2, 3], 3, never, False, torch.Generator())
    assert empty.tokens == [] and empty.probs == [] and "no proposal" in empty.note


# -- adaptive K (draft_confidence) -------------------------------------------------------------


@pytest.mark.parametrize("proposer", ["draft", "feature"])
def test_adaptive_k_stops_early_and_stays_exact(proposer):
    """With a confidence threshold the proposer drafts fewer than K tokens when its own top
    probability drops (never fewer than one); greedy output and every cache stay exact."""
    pair = greedy_pair("llama")
    shortened = {}
    for threshold in (0.0, 0.9):
        cfg = DecodeConfig(k=6, temperature=0, proposer=proposer, draft_confidence=threshold, max_new_tokens=NEW)
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(PROMPT)
        ks, allowed = [], []
        while not dec.finished:
            trace = dec.step()
            remaining = NEW - (trace.context_len - len(PROMPT))
            allowed.append(max(1, min(6, remaining - 1)))  # the engine's clamp near max_new_tokens
            ks.append(trace.k)
            assert_invariant(dec)
        assert dec.committed == list(greedy_reference("llama"))
        assert all(1 <= k <= a for k, a in zip(ks, allowed))
        shortened[threshold] = sum(k < a for k, a in zip(ks, allowed))
    assert shortened[0.0] == 0  # off: always the full (clamped) K
    assert shortened[0.9] > 0, shortened


def test_adaptive_k_is_a_live_setting_with_range_checks(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=4, temperature=0))
    dec.start(PROMPT)
    dec.update_config(dec.config.replace(draft_confidence=0.5))  # live: no restart needed
    assert dec.step().k >= 1
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ConfigError, match="draft_confidence"):
            DecodeConfig(draft_confidence=bad)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_the_prefill_reads_every_feature_but_scores_the_last_position_only(arch):
    """A feature proposer's prefill needs the target's features at every prompt position but no
    logits: the output head runs on the last position only, and the features, read from the decoder
    stack's output, are exactly what the output head reads in a full pass."""
    from specviz.kv import num_attention_layers
    from specviz.runtime import forward_with_features, output_head_inputs, sized_cache

    target = make_pair(arch).target
    cfg = DecodeConfig(cache_layout="contiguous", max_new_tokens=4)
    cache, features = open_cache_with_features(target, cfg, 64, PROMPT)
    with output_head_inputs(target) as caught:
        target(input_ids=torch.tensor([PROMPT[:-1]]))
    assert features.shape == (len(PROMPT) - 1, target.config.hidden_size)
    # The prefill attends through specviz's cache, the reference without one: the same sums, which another
    # CPU's kernels may order differently, so equal within TOL (float32 incremental vs one-shot attention).
    torch.testing.assert_close(features, caught[0][0], rtol=0, atol=TOL)
    rows = []
    hook = target.get_output_embeddings().register_forward_hook(lambda _m, args, _o: rows.append(args[0].shape[1]))
    try:
        fresh = sized_cache(num_attention_layers(target), cfg, 64, 64)
        logits, again = forward_with_features(target, fresh, PROMPT[:-1], "prefill", last_only=True)
    finally:
        hook.remove()
    assert rows == [1] and logits.shape[0] == 1 and torch.equal(again, features)
