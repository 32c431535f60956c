"""The exact acceptance rules, as pure functions: which drafts pass, and the token after them.

A rule walks the drafts from the root, stops where the target disagrees, and draws one more token:
the *corrected* token after a rejection, the *bonus* token at the end. Both rules return a `Walk`:

* `accept_chain` (docs/design.md §1; Leviathan et al. 2023): d_i, sampled from q_i, passes iff
  u_i <= min(1, p_i(d_i) / q_i(d_i)); the corrected token comes from norm(max(0, p_j - q_j)). All
  k ratios and k uniforms reach the host in one transfer; the generator is then rewound to just
  past the draws the tested drafts used, so the random stream is the per-draft rule's. What-if
  forcing is applied around the rule: forced drafts draw nothing, and forcing stops at an
  end-of-text draft whose acceptance is forced (it would end the text; the real test decides).
* `walk_tree` (§1c; EAGLE's `evaluate_posterior`): the deterministic-siblings rule for a ranked
  tree -- ask each child "is it x_j?" with probability p'(x_j), p' losing x_j after each no; a
  draw from p in steps, so it needs no q.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import torch

from . import sampling
from .tree import TokenTree


@dataclass
class Walk:
    """The outcome of a rule: the accepted path, every node's verdict, the token after the path."""

    path: list[int]  # accepted nodes, root's child first (a chain: 1..j)
    verdicts: list[str]  # per node; index 0 is the root, always "accepted"
    u: list[float | None]  # the uniform draw each tested node used (T > 0, not forced)
    ratios: list[float | None]  # the chance each node was accepted with (None: a tree node never asked)
    token: int  # the corrected token (a rejection) or the bonus token (the walk reached the end)
    kind: str  # "corrected" or "bonus"
    dist: torch.Tensor  # [V] the distribution `token` came from
    forced: list[bool] | None = None  # per node: its verdict was forced (what-if; chains only)
    overlaps: list[float] | None = None  # per node: sum_x min(p, q), the chance a draft from q passes

    @classmethod
    def start(cls, num_nodes: int) -> Walk:
        return cls([], ["accepted"] + ["untested"] * num_nodes, [None] * (num_nodes + 1),
                   [None] * (num_nodes + 1), -1, "", torch.empty(0))


# ---------------------------------------------------------------- the chain rule


def accept_chain(target_probs: torch.Tensor, draft_probs: torch.Tensor, drafts: Sequence[int], greedy: bool,
                 generator: torch.Generator, forced: Mapping[int, bool] | None = None,
                 eos_ids: Collection[int] = ()) -> Walk:
    """Test d_1..d_k (`draft_probs` [k, V] = q_1..q_k, `target_probs` [k+1, V] = p_1..p_{k+1})
    left to right; the first rejection ends the streak; then the corrected or bonus token.
    `forced` maps 1-based draft indices to verdicts to impose (what-if)."""
    k = len(drafts)
    walk = Walk.start(k)
    walk.forced = [False] * (k + 1)
    if k:
        host, uniforms, rewind = _chain_scores(target_probs, draft_probs, drafts, greedy, generator)
        used = _chain_verdicts(walk, host, uniforms, drafts, greedy, forced or {}, eos_ids)
        if rewind is not None and used < k:  # consume only the tested drafts' draws
            generator.set_state(rewind)
            if used:
                torch.rand(used, generator=generator, device=generator.device)
    j = len(walk.path)
    if j < k:  # a rejection at j+1: the residual (T = 0: the target's argmax), no bonus
        dist = target_probs[j] if greedy else sampling.residual_distribution(target_probs[j], draft_probs[j])
        walk.kind = "corrected"
    else:
        dist, walk.kind = target_probs[k], "bonus"
    walk.dist = dist
    walk.token = sampling.greedy_token(dist) if greedy else sampling.sample(dist, generator)
    return walk


def _chain_scores(target_probs: torch.Tensor, draft_probs: torch.Tensor, drafts: Sequence[int], greedy: bool,
                  generator: torch.Generator) -> tuple[list[list[float]], list[float], torch.Tensor | None]:
    """p_i(d_i), q_i(d_i), the ratio and sum_x min(p_i, q_i) of every draft, and (T > 0) k uniforms,
    brought to the host in one transfer. Ratios in float64, as Python floats would compute them."""
    k = len(drafts)
    rows = torch.arange(k, device=target_probs.device)
    index = torch.tensor(list(drafts), device=target_probs.device)
    p = target_probs[:k]
    p_tok, q_tok = p[rows, index].double(), draft_probs[rows, index].double()
    if greedy:
        ratio = (p.argmax(dim=-1) == index).double()
    else:  # min(1, p/q); a draft with q(d) = 0 (forced or foreign) passes only if p gives it mass
        ratio = torch.where(q_tok > 0, torch.clamp(p_tok / q_tok.clamp(min=1e-300), max=1.0), (p_tok > 0).double())
    overlap = sampling.expected_acceptance(p, draft_probs).double()
    rewind = None
    columns = [p_tok, q_tok, ratio, overlap]
    if not greedy:
        rewind = generator.get_state()
        columns.append(torch.rand(k, generator=generator, device=generator.device).double().to(p.device))
    host = torch.stack(columns).tolist()  # the one host sync of the rule
    return host[:4], host[4] if not greedy else [], rewind


def _chain_verdicts(walk: Walk, host: list[list[float]], uniforms: list[float], drafts: Sequence[int],
                    greedy: bool, forced: Mapping[int, bool], eos_ids: Collection[int]) -> int:
    """Fill the walk's verdicts, u and ratios; return how many uniforms the tests used."""
    _, _, ratios, overlaps = host
    walk.overlaps = [0.0, *overlaps]
    forcing, rejected, used = bool(forced), False, 0
    for i, token in enumerate(drafts, start=1):
        ratio = ratios[i - 1]
        walk.ratios[i] = ratio
        if rejected:
            continue  # untested: no draw
        force = forced.get(i) if forcing else None
        if force is True and token in eos_ids:  # forcing would end the text: the real test decides
            force, forcing = None, False
        if force is not None:
            ok = force
            walk.forced[i] = True
        elif greedy:
            ok = ratio == 1.0
        else:
            walk.u[i] = uniforms[used]
            used += 1
            ok = sampling.is_accepted(walk.u[i], ratio)
        walk.verdicts[i] = "accepted" if ok else "rejected"
        if ok:
            walk.path.append(i)
        rejected = not ok
    return used


# ---------------------------------------------------------------- the tree rule


def walk_tree(tree: TokenTree, target_probs: torch.Tensor, greedy: bool, generator: torch.Generator) -> Walk:
    """The accepted path through `tree` (`target_probs` [N+1, V]: row i scores node i's children)."""
    return walk_greedy(tree, target_probs) if greedy else walk_sampled(tree, target_probs, generator)


def walk_greedy(tree: TokenTree, target_probs: torch.Tensor) -> Walk:
    """T = 0: follow the target's argmax while a child matches it (no random draw)."""
    walk = Walk.start(tree.num_nodes)
    node = 0
    while True:
        want = sampling.greedy_token(target_probs[node])
        kids = tree.children(node)
        match = None
        for child in _distinct(tree, kids):
            if tree.tokens[child] == want:
                match = child
                break
            walk.verdicts[child] = "rejected"
        if match is None:
            walk.token, walk.kind, walk.dist = want, "bonus" if not kids else "corrected", target_probs[node]
            return walk
        walk.verdicts[match] = "accepted"
        walk.path.append(match)
        node = match


def walk_sampled(tree: TokenTree, target_probs: torch.Tensor, generator: torch.Generator) -> Walk:
    """T > 0, the deterministic-siblings rule: exactly a draw from the target's p, in steps."""
    walk = Walk.start(tree.num_nodes)
    node = 0
    while True:
        kids = tree.children(node)
        if not kids:  # an accepted leaf (or a bare root): the bonus from its full p
            dist = target_probs[node]
            walk.token, walk.kind, walk.dist = sampling.sample(dist, generator), "bonus", dist
            return walk
        residual = target_probs[node].clone()  # p', renormalised after each rejected child
        match = None
        for child in _distinct(tree, kids):
            token = tree.tokens[child]
            chance = float(residual[token])
            u = sampling.uniform(generator)
            walk.u[child], walk.ratios[child] = u, chance
            if u < chance:  # strict: a token with p'(x) = 0 is never accepted
                match = child
                break
            walk.verdicts[child] = "rejected"
            residual[token] = 0.0
            total = residual.sum()
            if total <= 0:  # cannot happen (a child with p'(x) = 1 always passes); keep p as the honest law
                residual = target_probs[node].clone()
                break
            residual = residual / total
        if match is None:
            walk.token, walk.kind, walk.dist = sampling.sample(residual, generator), "corrected", residual
            return walk
        walk.verdicts[match] = "accepted"
        walk.path.append(match)
        node = match


def _distinct(tree: TokenTree, kids: Sequence[int]):
    """The children in order, a duplicate sibling skipped untested (it would be asked with p'(x) = 0)."""
    seen: set[int] = set()
    for child in kids:
        if tree.tokens[child] not in seen:
            seen.add(tree.tokens[child])
            yield child
