"""The decoders being compared, each wrapped as `run(prompt_ids) -> (new tokens, extra)`.

* `ar`: specviz's plain autoregressive decoder of the target (same caches and sampling code as the
  speculative decoder), contiguous layout: the strongest baseline specviz has.
* `spec`: specviz's `SpeculativeDecoder` for a given K, temperature, layout and instrumentation.
* `hf` / `hf_assisted`: transformers' `generate`, alone and with `assistant_model=draft`.

Hugging Face's assisted generation reads its draft length from the *assistant's*
generation_config (transformers 5.23, `AssistedCandidateGenerator.__init__`), not from the
`generate` kwargs, so `hf_assisted` sets there: `num_assistant_tokens = K`,
`num_assistant_tokens_schedule = "constant"` (otherwise "heuristic" changes K every cycle), and
`assistant_confidence_threshold = 0` (its default 0.4 lets the draft stop early when unsure — a
dynamic K; 0 disables both that stopping criterion and its sklearn-tuned threshold). Sampling at
temperature 1 is pure (`top_k=0`, `top_p=1`) on both sides, since transformers' default top_k is
50. Every run is seeded, so reruns decode the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specviz import AutoregressiveDecoder, DecodeConfig, SpeculativeDecoder
from specviz.trace import CYCLE_PHASES

Runner = Callable[[list[int]], tuple[int, dict[str, Any]]]
SEED = 1234


def ar(pair: Any, temperature: float, max_new: int, layout: str = "contiguous") -> Runner:
    cfg = DecodeConfig(temperature=temperature, max_new_tokens=max_new, cache_layout=layout, seed=SEED)

    def run(prompt: list[int]) -> tuple[int, dict[str, Any]]:
        dec = AutoregressiveDecoder(pair.target, cfg, tokenizer=pair.tokenizer)
        dec.start(prompt)
        out = dec.generate()
        return len(out), {"tokens_out": out}

    return run


def spec_config(k: int, temperature: float, max_new: int, layout: str, instrument: bool, **kw: Any) -> DecodeConfig:
    return DecodeConfig(k=k, temperature=temperature, max_new_tokens=max_new, cache_layout=layout,
                        instrument=instrument, seed=SEED, **kw)


def spec(pair: Any, cfg: DecodeConfig, keep_traces: bool = False) -> Runner:
    """The speculative decoder; the extra dict carries per-run acceptance counts and phase times
    (the trace records them whether or not instrumentation is on)."""

    def run(prompt: list[int]) -> tuple[int, dict[str, Any]]:
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(prompt)
        traces = []
        while not dec.finished:
            traces.append(dec.step())
        new = len(dec.committed) - len(prompt)
        extra: dict[str, Any] = {
            "cycles": len(traces),
            "tested": sum(1 for t in traces for d in t.drafts if d.verdict != "untested"),
            "accepted": sum(t.num_accepted for t in traces),
            "phase_ms": {ph: sum(t.timings_ms.get(ph, 0.0) for t in traces) for ph in CYCLE_PHASES[1:]},
            "verify_ms": [t.timings_ms.get("verify", 0.0) for t in traces],
            "draft_ms": [t.timings_ms.get("draft", 0.0) for t in traces],
            "k": [t.k for t in traces],
            "tokens_out": dec.committed[len(prompt) :],
        }
        if keep_traces:
            extra["traces"] = traces
        return new, extra

    return run


def _hf_sampling(temperature: float) -> dict[str, Any]:
    if temperature == 0:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": float(temperature), "top_k": 0, "top_p": 1.0}


def hf(pair: Any, temperature: float, max_new: int) -> Runner:
    def run(prompt: list[int]) -> tuple[int, dict[str, Any]]:
        ids = torch.tensor([prompt], device=pair.target_device)
        torch.manual_seed(SEED)
        with torch.inference_mode():
            out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                       **_hf_sampling(temperature))
        new = out[0, len(prompt) :].tolist()
        return len(new), {"tokens_out": new}

    return run


def hf_assisted(pair: Any, k: int, temperature: float, max_new: int) -> Runner:
    def run(prompt: list[int]) -> tuple[int, dict[str, Any]]:
        gc = pair.draft.generation_config
        wanted = {"num_assistant_tokens": k, "num_assistant_tokens_schedule": "constant",
                  "assistant_confidence_threshold": 0.0}
        saved = {name: getattr(gc, name, None) for name in wanted}
        for name, value in wanted.items():
            setattr(gc, name, value)
        ids = torch.tensor([prompt], device=pair.target_device)
        # Count the target's forward passes: one per cycle (the first also prefills the prompt),
        # so ms/cycle can be compared with ours apart from how lucky each run's acceptances were.
        calls = [0]
        hook = pair.target.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        torch.manual_seed(SEED)
        try:
            with torch.inference_mode():
                out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                           assistant_model=pair.draft, **_hf_sampling(temperature))
        finally:
            hook.remove()
            for name, value in saved.items():
                setattr(gc, name, value)
        new = out[0, len(prompt) :].tolist()
        return len(new), {"tokens_out": new, "cycles": calls[0]}

    return run
