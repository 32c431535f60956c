"""A feature-level draft head (EAGLE-style): one decoder layer that reads the target's own features.

The head (EAGLE, Li et al. 2024) maps the pair (f_p, e(x_{p+1})) -- the target's final hidden state
at p (the input of its output head) and the target's frozen embedding of the next token -- through a
linear fusion and ONE Llama decoder layer of the target's width (with its own one-layer KV cache) to
a predicted feature g_{p+1}, which the target's frozen output head turns into logits for x_{p+2}.
A trimmed vocabulary S (FR-Spec) puts q = 0 outside S, exactly, and shrinks the output matmul by
|V| / |S|. The target's embedding and output head are borrowed, never saved, and a fingerprint of the
target refuses a head made for another model (docs/design.md §1b: the head, binding and files).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import IncompatiblePairError, ModelLoadError

FORMAT = "specviz-feature-head/1"
_PROBE_ROWS, _PROBE_COLS = 8, 4


def target_fingerprint(target: Any) -> dict[str, Any]:
    """What identifies the model a head was trained on: shape facts plus a few embedding values
    (compared with a tolerance, so a bfloat16 copy of the same target still matches)."""
    cfg = target.config.get_text_config()
    emb = target.get_input_embeddings().weight
    rows = torch.linspace(0, emb.shape[0] - 1, _PROBE_ROWS).long().tolist()
    probe = emb.detach()[rows][:, :_PROBE_COLS].float().cpu().flatten().tolist()
    return {
        "model_type": cfg.model_type,
        "hidden_size": int(emb.shape[1]),
        "vocab_size": int(target.get_output_embeddings().weight.shape[0]),
        "num_layers": int(getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", 0))),
        "embedding_probe": probe,
    }


def fingerprint_mismatch(expected: dict[str, Any], target: Any) -> str | None:
    """Why `target` is not the model `expected` describes, or None when it is."""
    got = target_fingerprint(target)
    for key in ("model_type", "hidden_size", "vocab_size", "num_layers"):
        if expected.get(key) != got[key]:
            return f"{key} is {got[key]!r}, the head was made for {expected.get(key)!r}"
    want = torch.tensor(expected["embedding_probe"])
    if not torch.allclose(want, torch.tensor(got["embedding_probe"]), rtol=2e-2, atol=2e-3):
        return "its embedding weights differ from those the head was trained on"
    return None


def _layer_config(target: Any) -> Any:
    """A one-layer Llama config of the target's width (any supported target family)."""
    from transformers import LlamaConfig

    cfg = target.config.get_text_config()
    hidden = int(target.get_input_embeddings().weight.shape[1])
    heads = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 1)
    if hidden % heads:
        heads = 1
    kv_heads = int(getattr(cfg, "num_key_value_heads", 0) or heads)
    if heads % kv_heads:
        kv_heads = heads
    intermediate = int(getattr(cfg, "intermediate_size", 0) or getattr(cfg, "n_inner", 0) or 4 * hidden)
    max_pos = int(getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048)
    extra = {}
    rope = getattr(cfg, "rope_parameters", None)
    if isinstance(rope, dict) and rope.get("rope_type", "default") == "default" and "rope_theta" in rope:
        extra["rope_theta"] = rope["rope_theta"]
    return LlamaConfig(
        vocab_size=1, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=1,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_pos,
        rms_norm_eps=float(getattr(cfg, "rms_norm_eps", 1e-5)), pad_token_id=None, bos_token_id=None,
        eos_token_id=None, tie_word_embeddings=False, **extra,
    )


class FeatureHead(nn.Module):
    """fuse(f_p, e(x_{p+1})) -> one decoder layer -> g_{p+1}; logits = output_head(g_{p+1})[S]."""

    def __init__(self, layer_config: Any, fingerprint: dict[str, Any], vocab: Sequence[int] | None = None,
                 info: dict[str, Any] | None = None) -> None:
        super().__init__()
        from transformers import LlamaModel

        hidden = layer_config.hidden_size
        self.layer_config = layer_config
        self.fingerprint = fingerprint
        self.info = dict(info or {})
        self.fuse = nn.Linear(2 * hidden, hidden, bias=False)  # [f ; e] -> decoder input
        layer_config._attn_implementation = "sdpa"
        self.decoder = LlamaModel(layer_config)  # one layer + final norm (its embedding is unused)
        ids = None if vocab is None else torch.as_tensor(sorted(set(int(v) for v in vocab)), dtype=torch.long)
        self.register_buffer("vocab", ids, persistent=False)  # the trimmed vocabulary S (None = all)
        self._target: tuple[Any, ...] = ()  # borrowed, never saved: (embedding, output head)

    # -- building, binding, files -----------------------------------------------------------

    @classmethod
    def random(cls, target: Any, seed: int = 0, vocab: Sequence[int] | None = None) -> FeatureHead:
        """An untrained head fitted to `target` (exactness holds whatever the head's quality)."""
        with torch.random.fork_rng(devices=[]):  # the global generator is left as it was
            torch.manual_seed(seed)
            head = cls(_layer_config(target), target_fingerprint(target), vocab, info={"trained": False})
        return head.bind(target)

    def bind(self, target: Any) -> FeatureHead:
        """Borrow the target's embedding and output head; refuse a target the head was not made for."""
        why = fingerprint_mismatch(self.fingerprint, target)
        if why is not None:
            raise IncompatiblePairError(f"this feature head was made for another target: {why}")
        out = target.get_output_embeddings()
        if self.vocab is not None and int(self.vocab.max()) >= out.weight.shape[0]:
            raise IncompatiblePairError("the head's vocabulary subset has ids beyond the target's output head")
        weight = next(target.parameters())
        self.to(device=weight.device, dtype=weight.dtype).eval().requires_grad_(False)
        self._target = (target.get_input_embeddings(), out)
        # Plain tensors, not parameters: the head never trains or saves the target's weights.
        rows = slice(None) if self.vocab is None else self.vocab  # the trimmed vocabulary S, or every row
        self.output_weight = out.weight.detach()[rows]  # [|S|, H]
        bias = getattr(out, "bias", None)
        self.output_bias = None if bias is None else bias.detach()[rows]
        self.vocab_size = int(out.weight.shape[0])
        return self

    def save(self, directory: str | os.PathLike[str]) -> Path:
        from safetensors.torch import save_file

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in self.state_dict().items()
                   if not k.startswith("decoder.embed_tokens")}
        if self.vocab is not None:
            tensors["vocab"] = self.vocab.to(torch.int32).cpu()
        save_file({k: v.cpu() for k, v in tensors.items()}, str(path / "model.safetensors"))
        meta = {"format": FORMAT, "layer_config": self.layer_config.to_dict(), "target": self.fingerprint,
                "info": self.info}
        (path / "config.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str], target: Any) -> FeatureHead:
        """Load a saved head and bind it to `target` (IncompatiblePairError if made for another)."""
        from safetensors.torch import load_file
        from transformers import LlamaConfig

        path = Path(directory)
        try:
            meta = json.loads((path / "config.json").read_text())
            tensors = load_file(str(path / "model.safetensors"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read a feature head from {path}: {exc}") from exc
        if meta.get("format") != FORMAT:
            raise ModelLoadError(f"{path} is not a specviz feature head (format {meta.get('format')!r})")
        vocab = tensors.pop("vocab", None)
        head = cls(LlamaConfig(**meta["layer_config"]), meta["target"],
                   None if vocab is None else vocab.tolist(), meta.get("info"))
        missing, unexpected = head.load_state_dict(tensors, strict=False)
        missing = [k for k in missing if not k.startswith("decoder.embed_tokens")]
        if missing or unexpected:
            raise ModelLoadError(f"feature head {path} does not match its config: missing {missing}, "
                                 f"unexpected {unexpected}")
        return head.bind(target)

    # -- computing ----------------------------------------------------------------------------

    def fused_input(self, features: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """[..., H] features and [...] token ids -> the decoder's input [..., H]."""
        return self.fuse(torch.cat([features, self._target[0](token_ids).to(features.dtype)], dim=-1))

    def candidate_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> logits over the candidate tokens [..., |S|]."""
        logits = predicted @ self.output_weight.T
        return logits if self.output_bias is None else logits + self.output_bias

    def full_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> logits over the whole vocabulary [..., V] (-inf outside S)."""
        logits = self.candidate_logits(predicted).float()
        if self.vocab is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.vocab] = logits
        return full

    def forward(self, features: torch.Tensor, token_ids: torch.Tensor, cache: Any = None,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted features [B, T, H] for input pairs (features [B, T, H], token_ids [B, T]).
        With `cache`, the pairs are appended to it (one sequence, B = 1). A token tree passes its
        own 4D additive mask and position ids (docs/design.md §1c)."""
        inputs = self.fused_input(features, token_ids)
        if cache is not None and inputs.shape[1] == 1 and attention_mask is None and position_ids is None:
            return self._one_step(inputs, cache)
        out = self.decoder(inputs_embeds=inputs, past_key_values=cache, use_cache=cache is not None,
                           attention_mask=attention_mask, position_ids=position_ids)
        return out.last_hidden_state

    def _one_step(self, inputs: torch.Tensor, cache: Any) -> torch.Tensor:
        """One drafting step straight through the layer: a single new query attends to every
        cached position, so it needs no mask; skipping the model wrapper's mask and bookkeeping
        keeps the head's cost ratio low."""
        start = cache.get_seq_length()
        positions = torch.arange(start, start + 1, device=inputs.device)[None]  # [1, 1]
        rotary = self.decoder.rotary_emb(inputs, positions)
        hidden = self.decoder.layers[0](inputs, attention_mask=None, position_ids=positions, past_key_values=cache,
                                        use_cache=True, cache_position=positions[0], position_embeddings=rotary)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return self.decoder.norm(hidden)
