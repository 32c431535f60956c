"""What both decoders need from a Hugging Face model: one forward into a specviz cache, the
ground-truth K/V of a fresh prefill, prompt checks, token texts and seeded generators.

`forward()` is the single place a model runs. It asks the cache to `reserve()` the positions
first, so a full cache or an exhausted block pool raises *before* the model computes anything,
and it cancels the reservation if the forward itself fails, so the cache is never left
half-written. `reference_kv()` runs the same tokens through transformers' own `DynamicCache`:
the invariant check compares every cache against it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from . import tokenbytes
from .config import DecodeConfig
from .errors import ConfigError, PromptError
from .kv import ContiguousKVCache, PagedKVCache, SpecvizCache, num_attention_layers


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def vocab_size_of(model: Any) -> int:
    """Rows of the output head (may exceed the tokenizer's vocabulary: padded embeddings)."""
    return int(model.get_output_embeddings().weight.shape[0])


def max_positions_of(model: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(model.config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_limit(cfg: DecodeConfig, *models: Any) -> int:
    """The most positions a sequence may hold: the config's max_context, capped by every model."""
    limits = [cfg.max_context, *(max_positions_of(m) for m in models)]
    return min(x for x in limits if x is not None)


def eos_ids_of(model: Any) -> frozenset[int]:
    """EOS ids from the generation config (preferred) or the model config."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = getattr(model.config, "eos_token_id", None)
    return frozenset([ids] if isinstance(ids, int) else ids or ())


@torch.inference_mode()
def forward(model: Any, cache: SpecvizCache, token_ids: Sequence[int], phase: str, last_only: bool = False,
            tree: tuple[torch.Tensor, Sequence[int]] | None = None) -> torch.Tensor:
    """Feed token_ids at the cache's next positions; return logits [T, V] (or [1, V]).
    `tree` = (mask, position ids) for token-tree nodes (see `forward_with_features`)."""
    return forward_with_features(model, cache, token_ids, phase, last_only, features=False, tree=tree)[0]


@torch.inference_mode()
def forward_with_features(
    model: Any, cache: SpecvizCache, token_ids: Sequence[int], phase: str, last_only: bool = False,
    features: bool = True, tree: tuple[torch.Tensor, Sequence[int]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As `forward`, and also the model's features [T, H]: the input of its output head (the
    final hidden state after the last norm), caught by a hook on that head in the same pass, so
    a feature-level draft head gets them without a second forward.

    `tree` = (mask, position ids) feeds token-tree nodes (docs/design.md §1c): an additive float
    mask [1, 1, T, L+T] and one position per token, passed to the model as they are."""
    extra = {} if tree is None else tree_inputs(model, *tree, num_tokens=len(token_ids))
    start_len = cache.get_seq_length()
    cache.reserve(list(token_ids), phase)
    # With last_only, the output head runs on the last position only (a prefill of n tokens would
    # otherwise compute and discard n - 1 rows of vocabulary logits: ~0.1 s for 200 prompt tokens
    # here), so the features are read where the head's input comes from, the decoder's output.
    catch = (decoder_outputs if last_only else output_head_inputs) if features else None
    with catch(model) if catch else contextlib.nullcontext([]) as caught:
        try:
            ids = torch.tensor([list(token_ids)], dtype=torch.long, device=model_device(model))  # [1, T]
            keep = 1 if last_only else 0
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=keep, **extra)
        except BaseException:
            cache.truncate(start_len, phase)  # cancel the reservation: the cache stays as it was
            raise
    logits = out.logits[0].float()  # [T, V]
    return (logits[-1:] if last_only else logits), (caught[0][0] if caught else None)


def tree_inputs(model: Any, mask: torch.Tensor, positions: Sequence[int], num_tokens: int) -> dict[str, Any]:
    """The `attention_mask` and `position_ids` keyword arguments of a tree forward, checked.

    transformers passes a 4D mask through unchanged; eager attention *adds* it to the scores, so a
    boolean mask would be silently wrong there (True = 1.0 added, nothing masked): refused here,
    as is flash attention, which reads any mask as padding."""
    if mask.dim() != 4 or mask.shape[-2] != num_tokens or len(positions) != num_tokens:
        raise ValueError(f"a tree forward over {num_tokens} tokens needs a [1, 1, {num_tokens}, L+{num_tokens}] "
                         f"mask and {num_tokens} positions, got {tuple(mask.shape)} and {len(positions)}")
    if not mask.is_floating_point():
        raise TypeError("a tree mask must be additive float (0 = attend, the dtype's minimum = masked): "
                        "eager attention adds the mask to the scores, so a boolean mask is silently wrong")
    impl = str(getattr(model.config, "_attn_implementation", "") or "")
    if "flash" in impl:
        raise ConfigError(f"token trees need eager or sdpa attention; {impl} reads a tree mask as padding")
    device = model_device(model)
    dtype = next(model.parameters()).dtype
    return {"attention_mask": mask.to(device=device, dtype=dtype if dtype.is_floating_point else mask.dtype),
            "position_ids": torch.tensor([list(positions)], dtype=torch.long, device=device)}


@contextlib.contextmanager
def output_head_inputs(model: Any) -> Iterator[list[torch.Tensor]]:
    """Collect the inputs of `model`'s output head ([1, T, H] each) during the `with` block.

    The model is shared by every session of a server, and a module's hooks fire for every
    caller: only this thread's passes are kept (another session's verify may run concurrently)."""
    with _caught(model.get_output_embeddings(), lambda args, _out: args[0]) as caught:
        yield caught


@contextlib.contextmanager
def decoder_outputs(model: Any) -> Iterator[list[torch.Tensor]]:
    """Collect the outputs of `model`'s decoder stack ([1, T, H], after its final norm): what its
    output head reads, for every position even when the head runs on the last one only."""
    with _caught(model.get_decoder(), lambda _args, out: out[0]) as caught:
        yield caught


@contextlib.contextmanager
def _caught(module: Any, pick: Any) -> Iterator[list[torch.Tensor]]:
    """What `pick(args, output)` takes from each of this thread's calls of `module` in the block."""
    caught: list[torch.Tensor] = []
    me = threading.get_ident()

    def catch(_m: Any, args: tuple, out: Any) -> None:
        if threading.get_ident() == me:
            caught.append(pick(args, out))

    hook = module.register_forward_hook(catch)
    try:
        yield caught
    finally:
        hook.remove()


def expected_reach(cfg: DecodeConfig, prompt_len: int, limit: int | None = None) -> int:
    """Positions a run's caches can reach: prompt + max_new_tokens + K + 1 (the verify pass
    appends K+1 positions provisionally; a tree verify appends tree_nodes + 1), capped by `limit`."""
    reach = prompt_len + cfg.max_new_tokens + (max(cfg.max_k, cfg.tree_nodes) if cfg.is_tree else cfg.max_k) + 1
    return reach if limit is None else min(reach, limit)


def sized_cache(num_layers: int, cfg: DecodeConfig, max_len: int, reach: int) -> SpecvizCache:
    """The one cache-sizing rule, for the target, every proposer's cache and a replay's caches:
    the configured layout, storage for `reach` positions at start (`expected_reach`), growing on
    demand up to `max_len`, the context limit (a paged pool capped at `cfg.num_blocks` if set)."""
    if cfg.cache_layout == "contiguous":
        return ContiguousKVCache(num_layers, max_len=max_len, initial_len=reach)
    return PagedKVCache(num_layers, max_len=max_len, page_size=cfg.page_size, policy=cfg.free_policy,
                        num_blocks=cfg.num_blocks, initial_len=reach)


def open_cache(model: Any, cfg: DecodeConfig, max_len: int, prompt_ids: Sequence[int], *,
               reach: int | None = None) -> SpecvizCache:
    """A new cache in the configured layout, prefilled with the prompt minus its last token
    (the invariant's starting point: the newest token's K/V is computed when it is fed).

    Storage is allocated for `reach` positions (None: `expected_reach(cfg, len(prompt_ids))`) and
    grows on demand up to `max_len`, the context limit."""
    return open_cache_with_features(model, cfg, max_len, prompt_ids, features=False, reach=reach)[0]


def open_cache_with_features(model: Any, cfg: DecodeConfig, max_len: int, prompt_ids: Sequence[int],
                             features: bool = True, *, reach: int | None = None
                             ) -> tuple[SpecvizCache, torch.Tensor | None]:
    """As `open_cache`, and the prefill's features [n-1, H] (None for a one-token prompt)."""
    reach = expected_reach(cfg, len(prompt_ids), max_len) if reach is None else reach
    cache = sized_cache(num_attention_layers(model), cfg, max_len, reach)
    caught = None
    if len(prompt_ids) > 1:
        caught = forward_with_features(model, cache, prompt_ids[:-1], "prefill", last_only=True, features=features)[1]
    cache.drain_events()
    return cache, caught


@torch.inference_mode()
def reference_kv(model: Any, token_ids: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) [1, H, T, D] of a fresh prefill with transformers' DynamicCache."""
    from transformers import DynamicCache

    cache = DynamicCache()
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=model_device(model))
    model(input_ids=ids, past_key_values=cache, use_cache=True)
    return [(layer.keys, layer.values) for layer in cache.layers]


def max_abs_kv_diff(model: Any, cache: SpecvizCache, token_ids: Sequence[int]) -> float:
    """Largest |difference| between the cache's K/V and a fresh prefill of token_ids."""
    if len(token_ids) != cache.get_seq_length():
        return float("inf")
    if not token_ids:
        return 0.0
    worst = 0.0
    for layer_idx, (ref_k, ref_v) in enumerate(reference_kv(model, token_ids)):
        keys, values = cache.dense_kv(layer_idx)
        worst = max(worst, (keys - ref_k).abs().max().item(), (values - ref_v).abs().max().item())
    return worst


def validate_prompt(prompt_ids: Sequence[int], vocab_size: int, max_context: int) -> list[int]:
    ids = list(prompt_ids)
    if not ids:
        raise PromptError("the prompt is empty: give at least one token")
    if bad := [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size]:
        raise PromptError(f"the prompt has token ids outside the vocabulary 0..{vocab_size - 1}: {bad[:5]}")
    if len(ids) >= max_context:
        raise PromptError(f"the prompt has {len(ids)} tokens but the context holds {max_context}; "
                          "shorten it so that at least one position is left for generation")
    return ids


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def copy_generator(gen: torch.Generator) -> torch.Generator:
    return torch.Generator(device=gen.device).set_state(gen.get_state())


class TokenTexts:
    """Token id -> display text, memoised (decoding is slow compared with a cycle).

    The text is `tokenizer.decode([id])`, except for a token whose bytes are not whole UTF-8
    characters (a piece of an emoji or a CJK character under a byte-level BPE, or a sentencepiece
    byte-fallback token): `decode` would show "�", so it is labelled with its bytes, `<0xF0><0x9F>`
    (specviz.tokenbytes). `characters(ids)` tells which consecutive tokens make which character."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        if token_id not in self._cache:
            self._cache[token_id] = f"<{token_id}>" if self.tokenizer is None else self._label(token_id)
        return self._cache[token_id]

    def _label(self, token_id: int) -> str:
        text = self.tokenizer.decode([token_id])
        if "\ufffd" not in text:  # whole characters: exactly what decode says (spacing included)
            return text
        raw = self._raw_bytes(token_id)
        return text if raw is None or tokenbytes.is_whole(raw) else tokenbytes.bytes_label(raw)

    def token_bytes(self, token_id: int) -> bytes | None:
        """The UTF-8 bytes the token stands for; None when the tokenizer gives no way to know."""
        if self.tokenizer is None:
            return None
        raw = self._raw_bytes(token_id)
        if raw is not None:
            return raw
        text = self(token_id)
        return None if "\ufffd" in text else text.encode("utf-8")

    def characters(self, token_ids: Sequence[int]) -> list[tokenbytes.CharacterSpan]:
        """Which consecutive tokens of `token_ids` together make which character (indices into
        `token_ids`), e.g. [CharacterSpan(5, 6, "🙂")]; characters inside one token are not listed."""
        return tokenbytes.character_spans([self.token_bytes(t) for t in token_ids])

    def _raw_bytes(self, token_id: int) -> bytes | None:
        """Bytes from the vocabulary string: byte-level BPE or byte fallback (None for neither)."""
        piece = self.tokenizer.convert_ids_to_tokens(int(token_id))
        if not isinstance(piece, str):
            return None
        if self._byte_level:
            raw = tokenbytes.byte_level_bytes(piece)
            if raw is not None:
                return raw
        return tokenbytes.byte_fallback_bytes(piece)

    @functools.cached_property
    def _byte_level(self) -> bool:
        # A byte-level BPE says so in its decoder (fast tokenizers) or keeps the table (slow GPT-2).
        decoder = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "decoder", None)
        return "ByteLevel" in repr(decoder) or hasattr(self.tokenizer, "byte_decoder")
