"""The speculative decoder, one cycle at a time (docs/design.md §1, §1c).

A cycle is layered as in gpt-fast: the proposer drafts (`specviz.proposers`), then `_verify ->
_accept -> _resolve -> _rollback`, each a short method; `step()` runs them and returns a
`CycleTrace`. A chain of K drafts is the width-1 token tree, so there is one cycle path: the
target verifies every node in one pass (a tree under its own mask, positions = the root's +
depth), an exact rule (`specviz.rules`) walks the drafts, and the rollback compacts the accepted
path's K/V into place (nothing to move for a chain) and truncates.

The cache invariant ("last token separate", as in llama.cpp, HF and gpt-fast): at the start of a
cycle with committed x_1..x_n, the target cache holds exactly x_1..x_{n-1}; the proposer's state
lags and is caught up first. Positions are 0-based: x_i sits at position i-1. Errors never leave
a half-done cycle: `step()` snapshots the small state and restores it if anything raises.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import costlaw, precision, rules, sampling
from . import tree as trees
from .allocator import pin_malloc_thresholds
from .config import LIVE_FIELDS, DecodeConfig
from .errors import ConfigError, ContextFullError, DecodingFinishedError
from .kv import SpecvizCache
from .proposers import Proposer, make_proposer
from .runtime import (
    TokenTexts,
    context_limit,
    copy_generator,
    eos_ids_of,
    expected_reach,
    forward_with_features,
    make_generator,
    max_abs_kv_diff,
    model_device,
    open_cache_with_features,
    validate_prompt,
    vocab_size_of,
)
from .suffix_store import SessionStore
from .trace import (
    AutoChoice,
    ContextMatch,
    CycleTrace,
    DraftStep,
    EmittedToken,
    PhaseSnapshot,
    TokenProb,
    TreeNode,
    TreeTrace,
)

DRAFT_SEED_SALT = 0x9E3779B9  # decorrelates the draft's random stream from the target's
TEXT_OPENING = 3  # prompt tokens kept before an answer in the session's store (the assistant header)


@dataclass
class _Session:
    """Everything a decoder mutates, so that it can be built whole and swapped in at once."""

    committed: list[int]
    num_prompt_tokens: int
    caches: dict[str, SpecvizCache]  # {"target": ...}; the proposer owns its own cache
    generators: dict[str, torch.Generator]
    proposer: Proposer
    cycle: int = 0
    finish_reason: str | None = None
    origins: list[str] = field(default_factory=list)  # per committed token: prompt/accepted/corrected/bonus
    # Per committed token: the match class of the cycle that committed it (a keyed proposer's, by
    # which auto counts its acceptance, `costlaw.match_class`); None for the prompt and other cycles.
    match_classes: list[int | None] = field(default_factory=list)
    remembered: bool = False  # its text is in the session's store


@dataclass
class _Proposal:
    """One cycle's drafts as a tree (a chain: nodes 1..k, each the child of the one before)."""

    tree: trees.TokenTree
    q: torch.Tensor | None  # [N, V]: row i-1 = the distribution node i was drawn or picked from
    catch_up_positions: list[int]
    note: str
    shape: trees.TreeShape | None = None  # a tree's shape (None: a chain)
    fed: list[int] = field(default_factory=list)  # tokens the proposer fed past its prefix growing a tree
    matched: ContextMatch | None = None  # retrieval: the context suffix the drafts followed
    sources: list[str] | None = None  # a merged proposer: who proposed each node 1..N


class _Clock:
    """Per-phase timings and (when instrumented) one cache snapshot per phase of a cycle. On a CUDA
    device the clock waits for the queued kernels before it reads: a forward returns as soon as its
    kernels are queued, so an unsynchronised verify pass would be booked under the phase after it."""

    def __init__(self, decoder: SpeculativeDecoder, s: _Session, record: bool, n: int) -> None:
        self.decoder, self.s, self.record = decoder, s, record
        self.timings: dict[str, float] = {}
        self.snaps: list[PhaseSnapshot] = []
        device = model_device(decoder.target)
        self.sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
        self.sync()
        self.t = self.start = time.perf_counter()
        if record:
            self.snaps.append(decoder._phase_snapshot(s, "start", n))

    @property
    def total_ms(self) -> float:
        """The cycle's own wall time, from its start to the last phase marked (the check apart)."""
        return (self.t - self.start) * 1000

    def mark(self, phase: str, num_committed: int) -> None:
        self.sync()
        now = time.perf_counter()
        self.timings[phase] = (now - self.t) * 1000
        if self.record:
            self.snaps.append(self.decoder._phase_snapshot(self.s, phase, num_committed))
        self.t = now


def _check_live_update(old: DecodeConfig, new: DecodeConfig) -> None:
    if not isinstance(new, DecodeConfig):
        raise ConfigError(f"expected a DecodeConfig, got {type(new).__name__}")
    changed = [f for f in old.__dataclass_fields__ if getattr(old, f) != getattr(new, f)]
    if frozen := [f for f in changed if f not in LIVE_FIELDS]:
        raise ConfigError(f"{', '.join(frozen)} shape the caches or the random stream; call start() to change them")


# ---------------------------------------------------------------- speculative decoder


class SpeculativeDecoder:
    """Exact speculative decoding over a (target, draft) pair, one cycle per `step()`."""

    def __init__(self, pair: Any, config: DecodeConfig | None = None, session_texts: SessionStore | None = None,
                 cost_law: costlaw.CostLaw | None = None) -> None:
        self.pair = pair
        self._cost_law = cost_law  # k="auto" decides by it; None: this machine's, measured on first use
        pin_malloc_thresholds()  # the cycle's transients reuse the same memory every cycle
        # What this session wrote before (retrieval drafts from it); its own store unless the app shares one.
        self.session_texts = SessionStore() if session_texts is None else session_texts
        self.config = config or DecodeConfig()
        self.config.validate()
        self.target = pair.target
        self.draft = pair.draft if self.config.proposer == "draft" else None
        self.dtype = precision.run_dtype(self.target, self.draft)  # sets the invariant's tolerance
        self.vocab_size = max(vocab_size_of(m) for m in (self.target, self.draft) if m is not None)
        self.eos_ids = eos_ids_of(self.target)
        self.token_text = TokenTexts(getattr(pair, "tokenizer", None))
        self._session: _Session | None = None

    # -- public state ---------------------------------------------------------------------

    @property
    def max_context(self) -> int:
        return context_limit(self.config, *(m for m in (self.target, self.draft) if m is not None))

    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def committed(self) -> list[int]:
        return list(self._require().committed)

    @property
    def origins(self) -> list[str]:
        return list(self._require().origins)

    @property
    def num_prompt_tokens(self) -> int:
        return self._require().num_prompt_tokens

    @property
    def target_cache(self) -> SpecvizCache:
        return self._require().caches["target"]

    @property
    def draft_cache(self) -> SpecvizCache | None:
        """The proposer's own KV cache (a draft model's, or a feature head's one layer); None for lookup."""
        return self._require().proposer.cache

    @property
    def proposer(self) -> Proposer:
        return self._require().proposer

    @property
    def finished(self) -> bool:
        return self._session is not None and self._session.finish_reason is not None

    @property
    def finish_reason(self) -> str | None:
        return None if self._session is None else self._session.finish_reason

    def update_config(self, config: DecodeConfig) -> None:
        """Change K / temperature / top-k / top-p (and other LIVE_FIELDS) from the next cycle."""
        _check_live_update(self.config, config)
        config.validate()
        self.config = config

    # -- start ----------------------------------------------------------------------------

    def start(self, prompt_ids: Sequence[int]) -> None:
        """Prefill both caches with the prompt minus its last token (the invariant's start)."""
        cfg = self.config
        ids = validate_prompt(prompt_ids, vocab_size_of(self.target), self.max_context)
        proposer = make_proposer(self.pair, cfg, self.max_context, self.vocab_size)
        proposer.session_texts = self.session_texts
        target_cache, features = open_cache_with_features(
            self.target, cfg, self.max_context, ids, features=proposer.wants_target_features,
            reach=expected_reach(cfg, len(ids), self.max_context),  # grows past it if K / max_new_tokens rise live
        )
        proposer.start(ids, features)
        generators = self._generators(cfg.seed)
        self.remember()  # an unfinished text is still this session's text
        # Built completely before it replaces the old session: a failure above changes nothing.
        self._session = _Session(ids, len(ids), {"target": target_cache}, generators, proposer,
                                 origins=["prompt"] * len(ids), match_classes=[None] * len(ids))

    def fork(self, seed: int | None = None) -> SpeculativeDecoder:
        """An independent copy of this decoder at its current state: caches copied, random
        streams copied (or, given `seed`, reseeded as start() would). Sampling many
        continuations of one context this way skips a prefill per sample."""
        s = self._require()
        cfg = self.config if seed is None else self.config.replace(seed=seed)
        twin = SpeculativeDecoder(self.pair, cfg, self.session_texts, self._cost_law)
        twin.eos_ids, twin.token_text = self.eos_ids, self.token_text
        twin._session = dataclasses.replace(
            s, committed=list(s.committed), origins=list(s.origins), match_classes=list(s.match_classes),
            remembered=True,  # a fork's text is a sample, not the session's
            caches={role: copy.deepcopy(cache) for role, cache in s.caches.items()}, proposer=s.proposer.fork(),
            generators=self._generators(cfg.seed) if seed is not None else {
                role: copy_generator(gen) for role, gen in s.generators.items()},
        )
        return twin

    def _generators(self, seed: int) -> dict[str, torch.Generator]:
        # Independent streams: with one seed for both, the draft's sampling draws and the
        # target's acceptance draws would be the same numbers, which biases the output.
        seeds = {"target": seed, "draft": seed ^ DRAFT_SEED_SALT}
        draft_device = model_device(self.draft if self.draft is not None else self.target)
        devices = {"target": model_device(self.target), "draft": draft_device}
        return {role: make_generator(devices[role], seeds[role]) for role in seeds}

    # -- one cycle ------------------------------------------------------------------------

    def step(self) -> CycleTrace:
        """Run one draft -> verify -> accept -> resolve -> rollback cycle."""
        s = self._require()
        if s.finish_reason is not None:
            raise DecodingFinishedError(f"decoding has finished ({s.finish_reason}); call start() to begin again")
        cfg = self.config
        n = len(s.committed)
        room = self.max_context - n  # committed never exceeds max_context; verify fills up to n-1+k
        if room < 1:
            raise ContextFullError(f"the context is full ({n} of {self.max_context} positions)")
        remaining = cfg.max_new_tokens - (n - s.num_prompt_tokens)
        k = max(1, min(cfg.max_k, room, remaining - 1))
        found = None if cfg.is_tree else s.proposer.match(s.committed, k)
        match_class = None if found is None else costlaw.match_class(cfg.proposer, found[0])
        auto = self._auto(s, cfg, min(k, remaining - 1), room, found, match_class) if cfg.auto else None

        saved = self._save(s)
        try:
            return self._cycle(s, cfg, n, k, remaining, room, auto, match_class)
        except BaseException:
            self._restore(s, saved)
            raise

    def generate(self, max_cycles: int | None = None) -> list[int]:
        """Run cycles until the sequence finishes (or max_cycles); return the new tokens."""
        s = self._require()
        before = len(s.committed)
        cycles = 0
        while not self.finished and (max_cycles is None or cycles < max_cycles):
            self.step()
            cycles += 1
        return s.committed[before:]

    @property
    def cost_law(self) -> costlaw.CostLaw:
        """The law k="auto" decides by: the one given, else this machine's for the pair (`costlaw.law_for`)."""
        if self._cost_law is None:
            self._cost_law = costlaw.law_for(self.pair)
        return self._cost_law

    def _auto(self, s: _Session, cfg: DecodeConfig, k: int, room: int, found: tuple[int, int] | None,
              matched: int | None) -> AutoChoice:
        """k="auto": the drafts (a tree: the node budget; 0 = a plain step) that maximise expected
        tokens per unit of time under this machine's cost law and the acceptance seen so far in
        this run (read from the committed tokens' origins, so a rebuilt decoder decides alike). A
        keyed proposer's (`found`: its match, in class `matched`) is the acceptance of earlier cycles
        after a match as long, and it is asked for no more drafts than the match has."""
        origins = s.origins[s.num_prompt_tokens:]
        if found is not None:
            if matched is None:
                return AutoChoice(0, 1.0, 1.0, 1.0, "plain step: the context's last tokens occur nowhere earlier, "
                                  "so there is nothing to copy")
            origins = costlaw.class_origins(origins, s.match_classes[s.num_prompt_tokens:], matched)
            k = min(k, found[1])
        tested, accepted = costlaw.acceptance_counts(origins)
        seen = costlaw.estimate(cfg.proposer, tested, accepted, cfg.max_k, matched)
        acceptance = costlaw.optimistic(seen, tested)  # an early run of bad luck does not end the drafting
        if cfg.is_tree:
            return costlaw.choose_tree(self.cost_law, cfg.proposer, acceptance, cfg.tree_width,
                                       min(cfg.tree_nodes, room) if k > 0 else 0)
        return costlaw.choose(self.cost_law, cfg.proposer, acceptance, max(k, 0), matched, seen[0] if seen else None)

    def _cycle(self, s: _Session, cfg: DecodeConfig, n: int, k: int, remaining: int, room: int,
               auto: AutoChoice | None = None, match_class: int | None = None) -> CycleTrace:
        """draft -> verify -> accept -> resolve -> rollback. A chain is the width-1 tree: its drafts
        are nodes 1..k, its verify needs only the causal mask, its accepted K/V are already in place."""
        clock = _Clock(self, s, cfg.instrument, n)
        proposal = self._draft(s, cfg, k, room, auto)
        clock.mark("draft", n)
        target_probs, features, slots = self._verify(s, cfg, proposal.tree)  # [N+1, V]
        clock.mark("verify", n)
        walk = self._accept(s, cfg, proposal, target_probs)
        s.proposer.observe_verify(None if features is None else features[[0, *walk.path]])  # real F of the path
        in_place = 0 if cfg.is_tree else len(walk.path)  # a tree's accepted K/V are not in place yet
        clock.mark("accept", n + in_place)
        emitted, finish_reason = self._resolve(proposal.tree, walk, n, remaining, room)
        clock.mark("resolve", n + min(in_place, len(emitted)))  # accepted drafts the trim kept
        self._commit(s, emitted, match_class)
        moves = self._rollback(s, n - 1, walk.path)
        clock.mark("rollback", len(s.committed))
        invariant = self._finish_cycle(s, cfg, clock, finish_reason)
        steps, nodes = self._node_records(cfg, n, proposal, target_probs, walk, slots)
        corrected = walk.kind == "corrected" and proposal.tree.num_nodes > 0
        dist_top = self._top(walk.dist, cfg) if cfg.instrument else ()
        shape = proposal.shape
        return CycleTrace(
            cycle=s.cycle - 1, context_len=n, k=proposal.tree.num_nodes,
            temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
            catch_up=self._catch_up(s, proposal.catch_up_positions, cfg.instrument), drafts=tuple(steps),
            num_accepted=len(walk.path), rejected_at=len(walk.path) + 1 if corrected else None,
            residual_top=dist_top if corrected else (), bonus_top=() if corrected else dist_top,
            emitted=tuple(emitted), target_events=tuple(s.caches["target"].drain_events()),
            draft_events=tuple(s.proposer.drain_events()), snapshots=tuple(clock.snaps),
            timings_ms=clock.timings, total_ms=clock.total_ms, invariant_max_abs_diff=invariant,
            finish_reason=finish_reason,
            forced=any(walk.forced or ()), proposer=s.proposer.name, proposer_note=proposal.note, dtype=self.dtype,
            matched=proposal.matched, auto=auto,
            tree=None if shape is None else TreeTrace(
                width=shape.width, depth=shape.depth, budget=shape.nodes, root_position=n - 1, root_slot=slots[0],
                nodes=tuple(nodes), path=tuple(walk.path), moves=tuple(moves), in_place=not moves,
                proposer_fed=tuple(proposal.fed),
            ),
        )

    def _draft(self, s: _Session, cfg: DecodeConfig, k: int, room: int, auto: AutoChoice | None = None) -> _Proposal:
        """The proposer's drafts as a tree: a chain of up to k sampled drafts, or (width > 1) a
        ranked tree of depth k. A proposer may propose fewer (lookup without a match: none).
        When auto chose a plain step the proposer is not asked (it catches up next time)."""
        if auto is not None and auto.k == 0:
            return _Proposal(trees.TokenTree.chain(s.committed[-1], []), None, [], auto.reason)
        if cfg.is_tree:  # the verify pass appends 1 + nodes entries: n - 1 + 1 + nodes <= max_context
            shape = trees.TreeShape(cfg.tree_width, k, min(cfg.tree_nodes if auto is None else auto.k, room))
            grown = s.proposer.propose_tree(s.committed, shape)
            rows = grown.tree.draft_probs
            q = None if rows is None else sampling.pad_vocab(rows[1:], self.vocab_size)
            return _Proposal(grown.tree, q, grown.catch_up_positions, grown.note, shape, grown.fed, grown.matched,
                             grown.sources)
        chain = s.proposer.propose(s.committed, k if auto is None else auto.k,
                                   lambda logits: self._distribution(logits, cfg), cfg.greedy,
                                   s.generators["draft"], cfg.draft_confidence)
        q = torch.stack(chain.probs) if chain.probs else None
        return _Proposal(trees.TokenTree.chain(s.committed[-1], chain.tokens), q, chain.catch_up_positions, chain.note,
                         matched=chain.matched, sources=chain.sources)

    def _verify(self, s: _Session, cfg: DecodeConfig, tree: trees.TokenTree
                ) -> tuple[torch.Tensor, torch.Tensor | None, list[int] | None]:
        """One target pass over the root x_n and every node: node i in cache entry L+i, at position
        L + depth(i), its K/V appended provisionally (a tree under its own additive mask; a chain's
        mask is the causal one). Returns p for every node [N+1, V], the target's features [N+1, H]
        (feature head only: from this same pass) and, for a tree, each node's physical slot."""
        cache = s.caches["target"]
        prefix = cache.get_seq_length()  # L = n - 1: the root x_n goes to entry L
        tree_inputs = None
        if cfg.is_tree:
            dtype = next(self.target.parameters()).dtype
            mask = trees.verify_mask(tree, prefix, dtype if dtype.is_floating_point else torch.float32,
                                     model_device(self.target))  # [1, 1, N+1, L+N+1]
            tree_inputs = (mask, tree.position_ids(prefix))
        logits, features = forward_with_features(self.target, cache, tree.tokens, "verify",
                                                 features=s.proposer.wants_target_features, tree=tree_inputs)
        slots = cache.slots(range(prefix, prefix + len(tree.tokens))) if cfg.is_tree else None
        return self._distribution(logits, cfg), features, slots

    def _accept(self, s: _Session, cfg: DecodeConfig, proposal: _Proposal, target_probs: torch.Tensor) -> rules.Walk:
        """The exact rule (`specviz.rules`): the chain's p/q test with what-if forcing around it, or
        a tree's deterministic-siblings walk; either ends with the corrected or bonus token."""
        gen = s.generators["target"]
        if cfg.is_tree:
            return rules.walk_tree(proposal.tree, target_probs, cfg.greedy, gen)
        forced = {i: ok for i, ok in reversed(cfg.forced_outcomes)}  # the first entry for an index wins
        return rules.accept_chain(target_probs, proposal.q, proposal.tree.tokens[1:], cfg.greedy, gen,
                                  forced, self.eos_ids)

    def _resolve(self, tree: trees.TokenTree, walk: rules.Walk, n: int, remaining: int, room: int
                 ) -> tuple[list[EmittedToken], str | None]:
        """The accepted drafts, then the corrected or bonus token (no drafts: a plain target step's
        `generated` token), cut by `_trim`."""
        emitted = [EmittedToken(tree.tokens[a], self.token_text(tree.tokens[a]), n + i, "accepted")
                   for i, a in enumerate(walk.path)]
        kind = walk.kind if tree.num_nodes else "generated"
        emitted.append(EmittedToken(walk.token, self.token_text(walk.token), n + len(walk.path), kind))
        return self._trim(emitted, remaining, room)

    def _trim(self, emitted: list[EmittedToken], remaining: int, room: int) -> tuple[list[EmittedToken], str | None]:
        """Cut at the first EOS (inclusive), at max_new_tokens and at the end of the context."""
        for i, tok in enumerate(emitted[: min(remaining, room)]):
            if tok.token_id in self.eos_ids:
                return emitted[: i + 1], "eos"
        if len(emitted) >= remaining:
            return emitted[:remaining], "max_new_tokens"
        if len(emitted) >= room:
            return emitted[:room], "context_full"
        return emitted, None

    def _commit(self, s: _Session, emitted: list[EmittedToken], match_class: int | None = None) -> None:
        s.committed.extend(t.token_id for t in emitted)
        s.origins.extend(t.kind for t in emitted)
        s.match_classes.extend([match_class] * len(emitted))

    def _rollback(self, s: _Session, prefix: int, path: list[int]) -> list[tuple[int, int]]:
        """Restore the invariant for the new committed length n': copy the accepted nodes the
        sequence keeps from their verify entries (prefix + a_i) to their positions (prefix + i), in
        increasing i (a chain, or a tree's most likely chain, is already in place: no move), then
        truncate the target cache to n' - 1 (freeing or keeping blocks by policy); the proposer
        restores its own. Returns the moves."""
        cache = s.caches["target"]
        keep = len(s.committed) - 1
        moves = [(prefix + a, prefix + i) for a, i in trees.compaction_moves(path, keep - prefix - 1)]
        cache.move(moves, "rollback")
        if cache.get_seq_length() > keep:
            cache.truncate(keep, "rollback")
        s.proposer.rollback(s.committed)
        return moves

    def _node_records(self, cfg: DecodeConfig, n: int, proposal: _Proposal, target_probs: torch.Tensor,
                      walk: rules.Walk, slots: list[int] | None) -> tuple[list[DraftStep], list[TreeNode]]:
        """Each draft as a DraftStep (every view's record) and, in a tree, as a TreeNode too."""
        tree, q, record = proposal.tree, proposal.q, cfg.instrument
        if not tree.num_nodes:
            return [], []
        device = target_probs.device
        parents = torch.tensor(tree.parents[1:], device=device)
        tokens = torch.tensor(tree.tokens[1:], device=device)
        p_tok = target_probs[parents, tokens]
        columns = [p_tok, torch.zeros_like(p_tok) if q is None else q[torch.arange(len(tokens), device=device), tokens]]
        if q is not None and walk.overlaps is None:  # the chain rule computed its own
            # Row by row: gathering p's rows into one [N, V] block costs more than the sums.
            columns.append(torch.stack([sampling.expected_acceptance(target_probs[parent], q[i])
                                        for i, parent in enumerate(tree.parents[1:])]))
        host = torch.stack(columns).tolist()
        argmax = target_probs.argmax(dim=-1).tolist() if cfg.greedy and walk.overlaps is None else None
        # Siblings share their parent's p (and, from `grow` or `from_paths`, their q): the top-n
        # lists, each a pass over the vocabulary, are computed once per parent and distinct q row.
        target_tops: dict[int, tuple[TokenProb, ...]] = {}
        draft_tops: dict[int, tuple[torch.Tensor, tuple[TokenProb, ...]]] = {}
        steps, nodes = [], []
        for i in range(1, len(tree.tokens)):
            token, parent = tree.tokens[i], tree.parents[i]
            p_i, q_i = host[0][i - 1], host[1][i - 1]
            ratio = walk.ratios[i]
            if ratio is None:  # never asked: what it would have been accepted with
                ratio = float(token == argmax[parent]) if argmax is not None else p_i
            overlap = walk.overlaps[i] if walk.overlaps is not None else None if q is None else host[2][i - 1]
            target_top = draft_top = ()
            if record:
                if parent not in target_tops:
                    target_tops[parent] = self._top(target_probs[parent], cfg)
                target_top = target_tops[parent]
                if q is not None:
                    seen = draft_tops.get(parent)
                    if seen is None or not torch.equal(seen[0], q[i - 1]):
                        seen = draft_tops[parent] = (q[i - 1], self._top(q[i - 1], cfg))
                    draft_top = seen[1]
            text = self.token_text(token) if record else ""
            position = n - 1 + tree.depths[i]
            steps.append(DraftStep(
                index=i, position=position, token_id=token, text=text, draft_prob=q_i, target_prob=p_i,
                ratio=ratio, u=walk.u[i], verdict=walk.verdicts[i], forced=bool(walk.forced and walk.forced[i]),
                draft_top=draft_top, target_top=target_top, overlap=overlap,
                source=proposal.sources[i - 1] if proposal.sources else "",
            ))
            if slots is not None:
                nodes.append(TreeNode(
                    index=i, parent=parent, depth=tree.depths[i], token_id=token, text=text, position=position,
                    slot=slots[i], draft_prob=q_i, target_prob=p_i, accept_prob=walk.ratios[i],
                    u=walk.u[i], verdict=walk.verdicts[i],
                ))
        return steps, nodes

    def _catch_up(self, s: _Session, positions: Sequence[int], record: bool) -> tuple[EmittedToken, ...]:
        """The committed tokens the proposer fed to catch up, as the trace records them."""
        return tuple(EmittedToken(s.committed[pos], self.token_text(s.committed[pos]) if record else "", pos,
                                  s.origins[pos]) for pos in positions)

    def _finish_cycle(self, s: _Session, cfg: DecodeConfig, clock: _Clock, finish_reason: str | None) -> dict | None:
        """The invariant check (when asked for), then the cycle is counted."""
        invariant = None
        if cfg.check_invariant:
            invariant = self.check_invariant()
            clock.timings["invariant_check"] = (time.perf_counter() - clock.t) * 1000
        s.finish_reason = finish_reason
        s.cycle += 1
        if finish_reason is not None:
            self.remember()
        return invariant

    def remember(self) -> None:
        """Add the current text (its answer, with the few tokens that open it) to `session_texts`, once."""
        s = self._session
        if s is not None and not s.remembered and len(s.committed) > s.num_prompt_tokens:
            s.remembered = True
            self.session_texts.add(s.committed[max(0, s.num_prompt_tokens - TEXT_OPENING):])

    def _distribution(self, logits: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
        """The sampling distribution over the pair's joint vocabulary: the same processing for
        target and draft, so q is exactly what the draft token was sampled from."""
        probs = sampling.process_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)
        return sampling.pad_vocab(probs, self.vocab_size)

    # -- checks and snapshots -------------------------------------------------------------

    def check_invariant(self) -> dict[str, float]:
        """Max |K/V difference| of each cache against a fresh prefill of the committed sequence
        (the draft's own, possibly shorter, prefix). 0.0 up to float noise when exact."""
        s = self._require()
        cache = s.caches["target"]
        out = {"target": max_abs_kv_diff(self.target, cache, s.committed[: cache.get_seq_length()])}
        proposer_diff = s.proposer.check_invariant(s.committed)
        if proposer_diff is not None:
            out["draft"] = proposer_diff
        return out

    def _phase_snapshot(self, s: _Session, phase: str, num_committed: int) -> PhaseSnapshot:
        return PhaseSnapshot(phase, s.caches["target"].snapshot(num_committed), s.proposer.snapshot(num_committed))

    def _top(self, probs: torch.Tensor, cfg: DecodeConfig) -> tuple[TokenProb, ...]:
        return tuple(TokenProb(tok, prob, self.token_text(tok)) for tok, prob in sampling.top_n(probs, cfg.top_n))

    # -- state save/restore ---------------------------------------------------------------

    def _require(self) -> _Session:
        if self._session is None:
            raise DecodingFinishedError("the decoder has not started: call start(prompt_ids) first")
        return self._session

    @staticmethod
    def _save(s: _Session) -> dict[str, Any]:
        return {
            "committed": len(s.committed),
            "lengths": {role: c.get_seq_length() for role, c in s.caches.items()},
            "generators": {role: g.get_state() for role, g in s.generators.items()},
            "proposer": s.proposer.save(),
        }

    @staticmethod
    def _restore(s: _Session, saved: dict[str, Any]) -> None:
        del s.committed[saved["committed"] :]
        del s.origins[saved["committed"] :]
        del s.match_classes[saved["committed"] :]
        for role, cache in s.caches.items():
            if cache.get_seq_length() > saved["lengths"][role]:
                cache.truncate(saved["lengths"][role], "rollback")
            cache.drain_events()
        for role, gen in s.generators.items():
            gen.set_state(saved["generators"][role])
        s.proposer.restore(saved["proposer"])
