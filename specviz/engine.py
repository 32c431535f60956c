"""The speculative decoder, one cycle at a time, and the plain autoregressive baseline.

A cycle (docs/design.md §1) is layered as in gpt-fast: the proposer's `propose` (specviz.proposers)
-> `_verify -> _accept -> _resolve -> _rollback`, each a short method, and `step()` runs them and
returns a `CycleTrace`.

The cache invariant ("last token separate", as in llama.cpp, HF and gpt-fast): at the start of a
cycle with committed sequence x_1..x_n,
  * the target cache holds K/V for exactly x_1..x_{n-1};
  * the proposer's state lags behind and is caught up first: a draft model's cache holds a prefix
    x_1..x_m, m <= n-1 (usually one token short, two after a fully accepted cycle, because d_K is
    sampled but never fed); a feature head's cache holds pairs built from the target's real
    features; prompt lookup has no cache at all (`specviz.proposers`).
The verify pass feeds [x_n, d_1, .., d_K] and appends their K/V provisionally; the rollback
truncates the target cache back to the new committed length minus one (and the proposer restores
its own invariant), so the next cycle computes exactly the distributions a plain autoregressive
decoder would. Which proposer drafts never changes verify, accept, resolve or the target's rollback.

Positions are 0-based: x_i sits at position i-1, so "target cache length n-1" means positions
0..n-2 are cached.

A token tree (`tree_width > 1`, docs/design.md §1c, `specviz.tree`) runs the same phases over a
tree instead of a chain: the proposer grows the tree, the target verifies every node in one pass
(its own tree mask, positions = the root's + depth), the accepted path is walked (greedy, or the
deterministic-siblings rule), and the rollback first *compacts* the accepted path's K/V into the
committed positions (`SpecvizCache.move`), then truncates as after a chain. Width 1 is the chain,
unchanged.

Errors never leave a half-done cycle behind: `step()` snapshots the decoder's small state
(committed tokens, cache lengths, generator states) and restores it if anything raises.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import precision, sampling
from . import tree as trees
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
from .trace import CycleTrace, DraftStep, EmittedToken, PhaseSnapshot, TokenProb, TreeNode, TreeTrace

DRAFT_SEED_SALT = 0x9E3779B9  # decorrelates the draft's random stream from the target's


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


@dataclass
class _Proposal:
    """One cycle's drafts and the distributions that scored them (shared by accept and resolve)."""

    n: int  # committed length when the cycle started
    drafts: list[int]  # d_1..d_k
    draft_probs: list[torch.Tensor]  # q_i [V] for i = 1..k
    target_probs: torch.Tensor  # p_1..p_{k+1} [k+1, V]


class _Clock:
    """Per-phase timings and (when instrumented) one cache snapshot per phase of a cycle."""

    def __init__(self, decoder: SpeculativeDecoder, s: _Session, record: bool, n: int) -> None:
        self.decoder, self.s, self.record = decoder, s, record
        self.timings: dict[str, float] = {}
        self.snaps: list[PhaseSnapshot] = []
        self.t = time.perf_counter()
        if record:
            self.snaps.append(decoder._phase_snapshot(s, "start", n))

    def mark(self, phase: str, num_committed: int) -> None:
        now = time.perf_counter()
        self.timings[phase] = (now - self.t) * 1000
        if self.record:
            self.snaps.append(self.decoder._phase_snapshot(self.s, phase, num_committed))
        self.t = now


def _check_live_update(old: DecodeConfig, new: DecodeConfig) -> None:
    if not isinstance(new, DecodeConfig):
        raise ConfigError(f"expected a DecodeConfig, got {type(new).__name__}")
    changed = [f for f in old.__dataclass_fields__ if getattr(old, f) != getattr(new, f)]
    frozen = [f for f in changed if f not in LIVE_FIELDS]
    if frozen:
        raise ConfigError(f"{', '.join(frozen)} shape the caches or the random stream; call start() to change them")


# ---------------------------------------------------------------- speculative decoder


class SpeculativeDecoder:
    """Exact speculative decoding over a (target, draft) pair, one cycle per `step()`."""

    def __init__(self, pair: Any, config: DecodeConfig | None = None) -> None:
        self.pair = pair
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
        target_cache, features = open_cache_with_features(
            self.target, cfg, self.max_context, ids, features=proposer.wants_target_features,
            reach=expected_reach(cfg, len(ids), self.max_context),  # grows past it if K / max_new_tokens rise live
        )
        proposer.start(ids, features)
        generators = self._generators(cfg.seed)
        # Built completely before it replaces the old session: a failure above changes nothing.
        self._session = _Session(
            ids, len(ids), {"target": target_cache}, generators, proposer, origins=["prompt"] * len(ids)
        )

    def fork(self, seed: int | None = None) -> SpeculativeDecoder:
        """An independent copy of this decoder at its current state: caches copied, random
        streams copied (or, given `seed`, reseeded as start() would). Sampling many
        continuations of one context this way skips a prefill per sample."""
        s = self._require()
        cfg = self.config if seed is None else self.config.replace(seed=seed)
        twin = SpeculativeDecoder(self.pair, cfg)
        twin.eos_ids, twin.token_text = self.eos_ids, self.token_text
        twin._session = dataclasses.replace(
            s,
            committed=list(s.committed),
            origins=list(s.origins),
            caches={role: copy.deepcopy(cache) for role, cache in s.caches.items()},
            proposer=s.proposer.fork(),
            generators=self._generators(cfg.seed) if seed is not None else {
                role: copy_generator(gen) for role, gen in s.generators.items()
            },
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
        k = max(1, min(cfg.k, room, remaining - 1))

        saved = self._save(s)
        try:
            if cfg.is_tree:
                return self._tree_cycle(s, cfg, n, k, remaining, room)
            return self._cycle(s, cfg, n, k, remaining, room)
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

    def _cycle(self, s: _Session, cfg: DecodeConfig, n: int, k: int, remaining: int, room: int) -> CycleTrace:
        clock = _Clock(self, s, cfg.instrument, n)
        record = cfg.instrument
        proposed = s.proposer.propose(
            s.committed, k, lambda logits: self._distribution(logits, cfg), cfg.greedy, s.generators["draft"],
            cfg.draft_confidence,
        )
        drafts, draft_probs = proposed.tokens, proposed.probs
        k = len(drafts)  # a proposer may propose fewer (lookup without a match: none)
        clock.mark("draft", n)
        target_probs = self._verify(s, cfg, drafts)  # [k+1, V]
        clock.mark("verify", n)
        proposal = _Proposal(n, drafts, draft_probs, target_probs)
        steps, num_accepted = self._accept(s, cfg, proposal)
        clock.mark("accept", n + num_accepted)
        emitted, dist_top = self._resolve(s, cfg, proposal, num_accepted)
        emitted, finish_reason = self._trim(emitted, remaining, room)
        clock.mark("resolve", n + min(num_accepted, len(emitted)))  # accepted drafts the trim kept
        self._commit(s, emitted)
        self._rollback(s)
        clock.mark("rollback", len(s.committed))
        invariant = self._finish_cycle(s, cfg, clock, finish_reason)

        rejected_at = num_accepted + 1 if num_accepted < k else None
        return CycleTrace(
            cycle=s.cycle - 1,
            context_len=n,
            k=k,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            top_p=cfg.top_p,
            catch_up=self._catch_up(s, proposed.catch_up_positions, record),
            drafts=tuple(steps),
            num_accepted=num_accepted,
            rejected_at=rejected_at,
            residual_top=dist_top if rejected_at is not None else (),
            bonus_top=dist_top if rejected_at is None else (),
            emitted=tuple(emitted),
            target_events=tuple(s.caches["target"].drain_events()),
            draft_events=tuple(s.proposer.drain_events()),
            snapshots=tuple(clock.snaps),
            timings_ms=clock.timings,
            invariant_max_abs_diff=invariant,
            finish_reason=finish_reason,
            forced=any(st.forced for st in steps),
            proposer=s.proposer.name,
            proposer_note=proposed.note,
            dtype=self.dtype,
        )

    def _catch_up(self, s: _Session, positions: Sequence[int], record: bool) -> tuple[EmittedToken, ...]:
        """The committed tokens the proposer fed to catch up, as the trace records them."""
        return tuple(
            EmittedToken(s.committed[pos], self.token_text(s.committed[pos]) if record else "", pos, s.origins[pos])
            for pos in positions
        )

    def _finish_cycle(self, s: _Session, cfg: DecodeConfig, clock: _Clock, finish_reason: str | None) -> dict | None:
        """The invariant check (when asked for), then the cycle is counted."""
        invariant = None
        if cfg.check_invariant:
            invariant = self.check_invariant()
            clock.timings["invariant_check"] = (time.perf_counter() - clock.t) * 1000
        s.finish_reason = finish_reason
        s.cycle += 1
        return invariant

    def _distribution(self, logits: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
        """The sampling distribution over the pair's joint vocabulary: the same processing for
        target and draft, so q is exactly what the draft token was sampled from."""
        probs = sampling.process_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)
        return sampling.pad_vocab(probs, self.vocab_size)

    def _verify(self, s: _Session, cfg: DecodeConfig, drafts: list[int]) -> torch.Tensor:
        """One target pass over [x_n, d_1..d_k]: K/V appended provisionally, k+1 distributions."""
        logits, features = forward_with_features(
            self.target, s.caches["target"], [s.committed[-1], *drafts], "verify",
            features=s.proposer.wants_target_features,
        )  # [k+1, V], [k+1, H]: a feature head gets the target's real features from this same pass
        s.proposer.observe_verify(features)
        return self._distribution(logits, cfg)

    def _accept(self, s: _Session, cfg: DecodeConfig, proposal: _Proposal) -> tuple[list[DraftStep], int]:
        """Test d_1..d_k left to right; the first rejection ends the streak."""
        n, drafts, draft_probs, target_probs = proposal.n, proposal.drafts, proposal.draft_probs, proposal.target_probs
        gen = s.generators["target"]
        record = cfg.instrument
        steps: list[DraftStep] = []
        num_accepted = 0
        rejected = False
        # What-if forcing stops at an end-of-text draft whose acceptance is forced: that would end
        # the whole text, which nobody asked for; from there on the real test decides.
        forcing = bool(cfg.forced_outcomes)
        for i, (token, q) in enumerate(zip(drafts, draft_probs), start=1):
            p = target_probs[i - 1]
            p_tok, q_tok = float(p[token]), float(q[token])
            if cfg.greedy:  # one-hot p and q: accept iff d_i is the target's argmax, no draw
                ratio = 1.0 if token == sampling.greedy_token(p) else 0.0
            else:
                ratio = sampling.acceptance_ratio(p_tok, q_tok)
            forced = cfg.forced_outcome(i) if forcing and not rejected else None
            if forced is True and token in self.eos_ids:
                forced, forcing = None, False
            u = None
            if rejected:
                verdict = "untested"
            else:
                if forced is not None:
                    ok = forced
                elif cfg.greedy:
                    ok = ratio == 1.0
                else:
                    u = sampling.uniform(gen)
                    ok = sampling.is_accepted(u, ratio)
                verdict = "accepted" if ok else "rejected"
                num_accepted += ok
                rejected = not ok
            steps.append(
                DraftStep(
                    index=i,
                    position=n + i - 1,
                    token_id=token,
                    text=self.token_text(token) if record else "",
                    draft_prob=q_tok,
                    target_prob=p_tok,
                    ratio=ratio,
                    u=u,
                    verdict=verdict,
                    forced=forced is not None,
                    draft_top=self._top(q, cfg) if record else (),
                    target_top=self._top(p, cfg) if record else (),
                    overlap=float(sampling.expected_acceptance(p, q)),
                )
            )
        return steps, num_accepted

    def _resolve(
        self, s: _Session, cfg: DecodeConfig, proposal: _Proposal, num_accepted: int
    ) -> tuple[list[EmittedToken], tuple[TokenProb, ...]]:
        """Accepted drafts, then the corrected token (rejection) or the bonus token (all accepted)."""
        n, drafts, draft_probs, target_probs = proposal.n, proposal.drafts, proposal.draft_probs, proposal.target_probs
        gen = s.generators["target"]
        k = len(drafts)
        emitted = [
            EmittedToken(tok, self.token_text(tok), n + i, "accepted") for i, tok in enumerate(drafts[:num_accepted])
        ]
        if num_accepted < k:  # rejection at j = num_accepted + 1: sample from the residual, no bonus
            j = num_accepted
            dist = target_probs[j] if cfg.greedy else sampling.residual_distribution(target_probs[j], draft_probs[j])
            kind = "corrected"
        else:  # all accepted: the bonus token from p_{K+1} (no proposal at all: a plain target step)
            dist = target_probs[k]
            kind = "bonus" if k else "generated"
        token = sampling.greedy_token(dist) if cfg.greedy else sampling.sample(dist, gen)
        emitted.append(EmittedToken(token, self.token_text(token), n + num_accepted, kind))
        return emitted, (self._top(dist, cfg) if cfg.instrument else ())

    def _trim(self, emitted: list[EmittedToken], remaining: int, room: int) -> tuple[list[EmittedToken], str | None]:
        """Cut at the first EOS (inclusive), at max_new_tokens and at the end of the context."""
        limit = min(remaining, room)
        for i, tok in enumerate(emitted[:limit]):
            if tok.token_id in self.eos_ids:
                return emitted[: i + 1], "eos"
        if len(emitted) >= remaining:
            return emitted[:remaining], "max_new_tokens"
        if len(emitted) >= room:
            return emitted[:room], "context_full"
        return emitted, None

    def _commit(self, s: _Session, emitted: list[EmittedToken]) -> None:
        s.committed.extend(t.token_id for t in emitted)
        s.origins.extend(t.kind for t in emitted)

    def _rollback(self, s: _Session) -> None:
        """Truncate the target cache to the new committed length minus one (the invariant); the
        proposer restores its own."""
        keep = len(s.committed) - 1
        cache = s.caches["target"]
        if cache.get_seq_length() > keep:
            cache.truncate(keep, "rollback")
        s.proposer.rollback(s.committed)

    # -- one token-tree cycle (docs/design.md §1c) ----------------------------------------

    def _tree_cycle(self, s: _Session, cfg: DecodeConfig, n: int, depth: int, remaining: int,
                    room: int) -> CycleTrace:
        """draft (grow a tree) -> verify (one pass, tree mask) -> accept (walk the path) ->
        resolve -> rollback (compact the path's K/V, then truncate)."""
        clock = _Clock(self, s, cfg.instrument, n)
        # The verify pass appends 1 + nodes entries: n - 1 + 1 + nodes <= max_context.
        shape = trees.TreeShape(cfg.tree_width, depth, min(cfg.tree_nodes, room))
        proposed = s.proposer.propose_tree(s.committed, shape)
        tree = proposed.tree
        clock.mark("draft", n)
        target_probs, features, slots = self._verify_tree(s, cfg, tree)  # [N+1, V]
        clock.mark("verify", n)
        walk = trees.walk_greedy(tree, target_probs) if cfg.greedy else trees.walk_sampled(
            tree, target_probs, s.generators["target"])
        s.proposer.observe_verify(None if features is None else features[[0, *walk.path]])  # real F of the path
        clock.mark("accept", n)  # the accepted K/V are not in place yet: nothing new is committed
        emitted = [EmittedToken(tree.tokens[a], self.token_text(tree.tokens[a]), n + i, "accepted")
                   for i, a in enumerate(walk.path)]
        kind = walk.kind if tree.num_nodes else "generated"
        emitted.append(EmittedToken(walk.token, self.token_text(walk.token), n + len(walk.path), kind))
        emitted, finish_reason = self._trim(emitted, remaining, room)
        clock.mark("resolve", n)
        self._commit(s, emitted)
        moves = self._compact(s, n - 1, walk.path)
        clock.mark("rollback", len(s.committed))
        invariant = self._finish_cycle(s, cfg, clock, finish_reason)

        record = cfg.instrument
        steps, nodes = self._tree_records(cfg, n, tree, target_probs, walk, slots)
        corrected = walk.kind == "corrected" and tree.num_nodes > 0
        dist_top = self._top(walk.dist, cfg) if record else ()
        return CycleTrace(
            cycle=s.cycle - 1,
            context_len=n,
            k=tree.num_nodes,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            top_p=cfg.top_p,
            catch_up=self._catch_up(s, proposed.catch_up_positions, record),
            drafts=tuple(steps),
            num_accepted=len(walk.path),
            rejected_at=len(walk.path) + 1 if corrected else None,
            residual_top=dist_top if corrected else (),
            bonus_top=() if corrected else dist_top,
            emitted=tuple(emitted),
            target_events=tuple(s.caches["target"].drain_events()),
            draft_events=tuple(s.proposer.drain_events()),
            snapshots=tuple(clock.snaps),
            timings_ms=clock.timings,
            invariant_max_abs_diff=invariant,
            finish_reason=finish_reason,
            proposer=s.proposer.name,
            proposer_note=proposed.note,
            dtype=self.dtype,
            tree=TreeTrace(
                width=shape.width, depth=shape.depth, budget=shape.nodes, root_position=n - 1, root_slot=slots[0],
                nodes=tuple(nodes), path=tuple(walk.path), moves=tuple(moves), in_place=not moves,
                proposer_fed=tuple(proposed.fed),
            ),
        )

    def _verify_tree(self, s: _Session, cfg: DecodeConfig, tree: trees.TokenTree
                     ) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        """One target pass over the root and every node: node i in cache entry L+i, at position
        L + depth(i), under the additive tree mask. Returns p for every node [N+1, V], the
        target's features [N+1, H] (feature head only) and each node's physical slot."""
        cache = s.caches["target"]
        prefix = cache.get_seq_length()  # L = n - 1: the root x_n goes to entry L
        dtype = next(self.target.parameters()).dtype
        mask = trees.verify_mask(tree, prefix, dtype if dtype.is_floating_point else torch.float32,
                                 model_device(self.target))  # [1, 1, N+1, L+N+1]
        logits, features = forward_with_features(
            self.target, cache, tree.tokens, "verify", features=s.proposer.wants_target_features,
            tree=(mask, tree.position_ids(prefix)),
        )
        slots = cache.slots(range(prefix, prefix + len(tree.tokens)))
        return self._distribution(logits, cfg), features, slots

    def _compact(self, s: _Session, prefix: int, path: list[int]) -> list[tuple[int, int]]:
        """The KV update after a tree verify: copy the accepted nodes the committed sequence keeps
        from their verify entries (prefix + a_i) to their positions (prefix + i), in increasing i,
        then truncate to the new committed length minus one (freeing or keeping blocks by policy).
        Returns the moves; none when the path was already in place (the common case, since the
        most likely chain is nodes 1, 2, ..)."""
        cache = s.caches["target"]
        keep = len(s.committed) - 1
        moves = [(prefix + a, prefix + i) for a, i in trees.compaction_moves(path, keep - prefix - 1)]
        cache.move(moves, "rollback")
        if cache.get_seq_length() > keep:
            cache.truncate(keep, "rollback")
        s.proposer.rollback(s.committed)
        return moves

    def _tree_records(self, cfg: DecodeConfig, n: int, tree: trees.TokenTree, target_probs: torch.Tensor,
                      walk: trees.TreeWalk, slots: list[int]) -> tuple[list[DraftStep], list[TreeNode]]:
        """Each node as a DraftStep (the chain views' record) and as a TreeNode (the tree's)."""
        record = cfg.instrument
        steps, nodes = [], []
        # Siblings share their parent's p (and, from `grow` or `from_paths`, their q): what depends
        # only on those -- p's argmax, the top-n lists, each a pass over the vocabulary -- is
        # computed once per parent (q's top-n once per distinct q row).
        by_parent: dict[int, tuple[int | None, tuple[TokenProb, ...]]] = {}  # parent -> argmax p, top of p
        q_tops: dict[int, tuple[torch.Tensor, tuple[TokenProb, ...]]] = {}  # parent -> q, top of q
        for i in range(1, len(tree.tokens)):
            token, parent = tree.tokens[i], tree.parents[i]
            p = target_probs[parent]
            q = sampling.pad_vocab(tree.draft_probs[i], self.vocab_size) if tree.draft_probs is not None else None
            p_tok = float(p[token])
            q_tok = 0.0 if q is None else float(q[token])
            if parent not in by_parent:
                by_parent[parent] = (sampling.greedy_token(p) if cfg.greedy else None,
                                     self._top(p, cfg) if record else ())
            argmax, target_top = by_parent[parent]
            draft_top: tuple[TokenProb, ...] = ()
            if record and q is not None:
                seen = q_tops.get(parent)
                if seen is None or not torch.equal(seen[0], q):
                    seen = q_tops[parent] = (q, self._top(q, cfg))
                draft_top = seen[1]
            if cfg.greedy:
                ratio = 1.0 if token == argmax else 0.0
            else:  # the chance it was (or would have been) accepted with: p'(x), or p(x) if never asked
                ratio = walk.accept_probs[i] if walk.accept_probs[i] is not None else p_tok
            text = self.token_text(token) if record else ""
            position = n - 1 + tree.depths[i]
            steps.append(DraftStep(
                index=i, position=position, token_id=token, text=text, draft_prob=q_tok, target_prob=p_tok,
                ratio=ratio, u=walk.u[i], verdict=walk.verdicts[i], forced=False,
                draft_top=draft_top, target_top=target_top,
                overlap=None if q is None else float(sampling.expected_acceptance(p, q)),
            ))
            nodes.append(TreeNode(
                index=i, parent=parent, depth=tree.depths[i], token_id=token, text=text, position=position,
                slot=slots[i], draft_prob=q_tok, target_prob=p_tok, accept_prob=walk.accept_probs[i],
                u=walk.u[i], verdict=walk.verdicts[i],
            ))
        return steps, nodes

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
        return PhaseSnapshot(
            phase=phase,
            target=s.caches["target"].snapshot(num_committed),
            draft=s.proposer.snapshot(num_committed),
        )

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
        for role, cache in s.caches.items():
            if cache.get_seq_length() > saved["lengths"][role]:
                cache.truncate(saved["lengths"][role], "rollback")
            cache.drain_events()
        for role, gen in s.generators.items():
            gen.set_state(saved["generators"][role])
        s.proposer.restore(saved["proposer"])
