"""The chain rule as a pure function (specviz.rules.accept_chain): exact, and drawing exactly the
uniforms the per-draft rule draws, with what-if forcing applied around it."""

from __future__ import annotations

import collections

import pytest
import torch
from cuda_checks import chi_square

from specviz import rules, sampling

V = 6


def dists(seed: int, rows: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, V, generator=gen) * 1.5, dim=-1)


def acceptance_ratio(target_prob: float, draft_prob: float) -> float:
    """min(1, p(d) / q(d)), written out: a token with q(d) = 0 passes only where the target gives it mass."""
    if draft_prob <= 0:
        return 1.0 if target_prob > 0 else 0.0
    return min(1.0, target_prob / draft_prob)


def per_draft_rule(p: torch.Tensor, q: torch.Tensor, drafts: list[int], gen: torch.Generator) -> tuple[list, int]:
    """The textbook loop, one draw per tested draft: (verdicts, the token after the streak)."""
    verdicts = []
    for i, d in enumerate(drafts):
        u = sampling.uniform(gen)
        if u <= acceptance_ratio(float(p[i, d]), float(q[i, d])):
            verdicts.append("accepted")
            continue
        verdicts.append("rejected")
        verdicts += ["untested"] * (len(drafts) - i - 1)
        return verdicts, sampling.sample(sampling.residual_distribution(p[i], q[i]), gen)
    return verdicts, sampling.sample(p[len(drafts)], gen)


@pytest.mark.parametrize("seed", range(30))
def test_the_vectorised_rule_draws_what_the_per_draft_loop_draws(seed):
    p, q = dists(seed, 4), dists(seed + 100, 3)
    drafts = [int(torch.multinomial(q[i], 1, generator=torch.Generator().manual_seed(seed + i))) for i in range(3)]
    mine, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    walk = rules.accept_chain(p, q, drafts, False, mine)
    verdicts, token = per_draft_rule(p, q, drafts, theirs)
    assert walk.verdicts[1:] == verdicts and walk.token == token
    assert torch.equal(mine.get_state(), theirs.get_state())  # the same draws consumed, no more


def test_the_first_emitted_token_is_distributed_as_the_target():
    p, q = dists(7, 3), dists(8, 2)
    gen, n = torch.Generator().manual_seed(0), 20000
    counts = collections.Counter()
    for _ in range(n):
        drafts = [sampling.sample(q[0], gen), sampling.sample(q[1], gen)]
        walk = rules.accept_chain(p, q, drafts, False, gen)
        counts[drafts[0] if walk.path else walk.token] += 1
    _, p_value = chi_square(counts, {t: float(p[0, t]) for t in range(V)}, n)
    assert p_value > 1e-3


def test_greedy_draws_nothing_and_follows_the_argmax():
    p = torch.eye(V)[[2, 4, 1]]
    gen = torch.Generator().manual_seed(3)
    before = gen.get_state()
    walk = rules.accept_chain(p, torch.eye(V)[[2, 5]], [2, 5], True, gen)
    assert walk.verdicts == ["accepted", "accepted", "rejected"] and walk.token == 4 and walk.kind == "corrected"
    assert walk.u == [None, None, None] and torch.equal(gen.get_state(), before)


def test_forcing_is_applied_around_the_rule_and_stops_at_end_of_text():
    p, q = dists(1, 4), dists(2, 3)
    walk = rules.accept_chain(p, q, [0, 1, 2], False, torch.Generator().manual_seed(0), {1: True, 2: False})
    assert walk.verdicts == ["accepted", "accepted", "rejected", "untested"] and walk.forced[1:3] == [True, True]
    assert walk.u[1] is None and walk.u[2] is None and walk.kind == "corrected"
    eos = rules.accept_chain(p, q, [0, 1, 2], False, torch.Generator().manual_seed(0), {1: True, 2: True}, {1})
    assert eos.forced[1] and not eos.forced[2] and eos.u[2] is not None  # d2 is end-of-text: the real test
