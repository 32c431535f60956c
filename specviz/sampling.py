"""The math of speculative sampling, as pure functions over tensors (docs/design.md §1).

The draft samples d_i ~ q_i; d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i)); at the
first rejection the corrected token is drawn from norm(max(0, p_i - q_i)); if all pass, a bonus
token from p_{K+1} (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023). Both p and q must be
the distributions tokens are really sampled from, after the same temperature / top-k / top-p
processing (`process_logits`); a raw softmax for one of them silently breaks exactness (HF
transformers issues #32867, #47932). Temperature 0 is its own case: one-hot distributions, no
division, no draw. Randomness comes only from the `torch.Generator` passed in.
The rules that combine these into a cycle's verdicts are in `specviz.rules`.
"""

from __future__ import annotations

import torch


def process_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Logits [..., V] -> the sampling distribution [..., V] (float32), as HF's warpers order it:
    temperature, then top-k, then top-p. Temperature 0 gives the one-hot greedy distribution."""
    logits = logits.float()
    if temperature == 0:
        # Scattered straight into float32: one_hot would build an int64 copy of [..., V] first.
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    logits = logits / temperature
    if top_k > 0 and top_k < logits.shape[-1]:
        kth_best = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))  # ties with the k-th are kept
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        probs = _top_p_filter(probs, top_p)
    return probs


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly above each token
    keep_sorted = mass_before < top_p  # the most likely token is always kept (mass_before = 0)
    kept = probs * torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return kept / kept.sum(dim=-1, keepdim=True)


def pad_vocab(probs: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Zero-pad the last dim to vocab_size: a model whose (padded) embedding is smaller simply
    gives probability 0 to the tokens it lacks, which keeps the acceptance rule exact."""
    missing = vocab_size - probs.shape[-1]
    return torch.nn.functional.pad(probs, (0, missing)) if missing > 0 else probs


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one token id from probs [V]."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


def uniform(generator: torch.Generator) -> float:
    """Draw u ~ U(0, 1) for one acceptance test."""
    return float(torch.rand((), generator=generator, device=generator.device).item())


def is_accepted(u: float, ratio: float) -> bool:
    """The acceptance test: u <= min(1, p/q)."""
    return u <= ratio


def residual_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, target_probs - draft_probs)) [V]: where the target wants more mass than the
    draft proposed. After a real rejection it is never all zero (a rejection needs p(d) < q(d),
    so p != q); only a forced rejection with p == q can zero it, and then the target's own
    distribution is the honest fallback."""
    residual = torch.clamp(target_probs - draft_probs, min=0)
    total = residual.sum()
    if total <= 0:
        return target_probs
    return residual / total


def greedy_token(probs: torch.Tensor) -> int:
    return int(probs.argmax(dim=-1).item())


def top_n(probs: torch.Tensor, n: int) -> list[tuple[int, float]]:
    """The n most likely (token id, probability) pairs of probs [V], zero-probability ones dropped."""
    values, ids = torch.topk(probs, min(n, probs.shape[-1]))
    return [(int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist()) if v > 0]


def expected_acceptance(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """alpha = sum_x min(p(x), q(x)) along the last dim: the probability that a draft token
    sampled from q is accepted (Leviathan et al., Definition 3.1)."""
    return torch.minimum(target_probs, draft_probs).sum(dim=-1)
