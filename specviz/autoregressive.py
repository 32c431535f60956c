"""Plain autoregressive decoding: one model, one token per forward.

The baseline speculative decoding is measured against and must agree with (same caches, `forward()`
and sampling): identical tokens at temperature 0, the same distribution at any temperature.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from . import runtime, sampling
from .allocator import pin_malloc_thresholds
from .config import DecodeConfig
from .errors import ContextFullError, DecodingFinishedError
from .kv import SpecvizCache


class AutoregressiveDecoder:
    """Decode one model token by token; the cache always holds the committed sequence minus
    its newest token, exactly like the speculative decoder's target cache between cycles."""

    def __init__(self, model: Any, config: DecodeConfig | None = None, tokenizer: Any | None = None) -> None:
        self.model = model
        pin_malloc_thresholds()  # as the speculative decoder: a fair comparison
        self.config = config or DecodeConfig()
        self.eos_ids = runtime.eos_ids_of(model)
        self.token_text = runtime.TokenTexts(tokenizer)
        self.max_context = runtime.context_limit(self.config, model)
        self._committed: list[int] = []
        self.num_prompt_tokens = 0
        self.finish_reason: str | None = None
        self.cache: SpecvizCache | None = None
        self.generator: torch.Generator | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def committed(self) -> list[int]:
        return list(self._committed)

    def start(self, prompt_ids: Sequence[int]) -> None:
        ids = runtime.validate_prompt(prompt_ids, runtime.vocab_size_of(self.model), self.max_context)
        # Sized for what the run can reach; it grows on demand (max_new_tokens may rise) up to max_context.
        cache = runtime.open_cache(self.model, self.config, self.max_context, ids)
        self.cache, self._committed, self.num_prompt_tokens = cache, ids, len(ids)
        self.generator = runtime.make_generator(runtime.model_device(self.model), self.config.seed)
        self.finish_reason = None

    def fork(self, seed: int | None = None) -> AutoregressiveDecoder:
        """An independent copy at the current state (cache copied; reseeded if `seed` is given)."""
        if self.cache is None or self.generator is None:
            raise DecodingFinishedError("the decoder has not started: call start(prompt_ids) first")
        twin = copy.copy(self)  # the model, EOS ids, token texts and counts: shared or immutable
        twin.cache, twin._committed = copy.deepcopy(self.cache), list(self._committed)
        if seed is None:
            twin.generator = runtime.copy_generator(self.generator)
        else:
            twin.config = self.config.replace(seed=seed)
            twin.generator = runtime.make_generator(runtime.model_device(self.model), seed)
        return twin

    def step(self) -> int:
        """Feed the newest token, sample the next one, commit it; return its id."""
        if self.cache is None or self.generator is None:
            raise DecodingFinishedError("the decoder has not started: call start(prompt_ids) first")
        if self.finished:
            raise DecodingFinishedError(f"decoding has finished ({self.finish_reason}); call start() to begin again")
        if len(self._committed) >= self.max_context:
            raise ContextFullError(f"the context is full ({len(self._committed)} of {self.max_context} positions)")
        cfg = self.config
        logits = runtime.forward(self.model, self.cache, [self._committed[-1]], "decode", last_only=True)[-1]  # [V]
        probs = sampling.process_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)
        token = sampling.greedy_token(probs) if cfg.greedy else sampling.sample(probs, self.generator)
        self._committed.append(token)
        self.cache.drain_events()
        if token in self.eos_ids:
            self.finish_reason = "eos"
        elif len(self._committed) - self.num_prompt_tokens >= cfg.max_new_tokens:
            self.finish_reason = "max_new_tokens"
        elif len(self._committed) >= self.max_context:
            self.finish_reason = "context_full"
        return token

    def generate(self) -> list[int]:
        """Decode until the sequence finishes; return the new tokens."""
        before = len(self._committed)
        while not self.finished:
            self.step()
        return self._committed[before:]
