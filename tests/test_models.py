"""Loading model pairs: the embedded default pair (offline) and every load / compatibility error.

Error cases use tiny random-config models and real tokenizers built in code and saved to temporary
directories, then loaded through the same Hugging Face code paths as real checkpoints.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from specviz import DecodeConfig, FeatureHead, SpeculativeDecoder, kernels
from specviz.errors import IncompatiblePairError, ModelLoadError
from specviz.models import (
    ModelPair,
    default_draft_dir,
    load_default_pair,
    load_pair,
    resolve_model_dir,
)

# ------------------------------------------------------------------------------------------------
# tiny models saved to disk


# The decoder shape of every config-only tiny model below (one layer, grouped-query attention).
TINY_DECODER = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
)


def _char_tokenizer(reverse: bool = False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list("abcdefghijklmnopqrstuvwxyz .,!?")
    if reverse:  # same strings, different ids: an incompatible vocabulary
        chars = chars[::-1]
    vocab = {tok: i for i, tok in enumerate(["<unk>", "<eos>", *chars])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


def _save_llama(path: Path, *, reverse_vocab: bool = False, layers: int = 1, seed: int = 0) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _char_tokenizer(reverse_vocab)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _save_config_only(path: Path, config) -> Path:
    """A model directory holding a config (and the tiny tokenizer): enough to be rejected early."""
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    _char_tokenizer().save_pretrained(path)
    return path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No hub: HF_HUB_OFFLINE set and an empty Hugging Face cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    return tmp_path


# ------------------------------------------------------------------------------------------------
# loading tiny pairs


def test_tiny_pair_loads_in_eval_mode_without_grad(tmp_path: Path) -> None:
    target = _save_llama(tmp_path / "target", layers=2)
    draft = _save_llama(tmp_path / "draft", seed=1)
    messages: list[tuple[str, float | None]] = []
    pair = load_pair(str(target), str(draft), progress=lambda m, f: messages.append((m, f)))
    assert isinstance(pair, ModelPair)
    for model in (pair.target, pair.draft):
        assert not model.training
        assert all(not p.requires_grad for p in model.parameters())
        assert next(model.parameters()).dtype == torch.float32  # CPU default
    assert pair.target.config.num_hidden_layers == 2
    assert pair.tokenizer.convert_ids_to_tokens(2) == "a"
    assert messages and messages[-1][1] == 1.0
    assert pair.target_name == str(target) and pair.draft_name == str(draft)


def test_explicit_dtype_and_draft_device(tmp_path: Path) -> None:
    target = _save_llama(tmp_path / "target")
    draft = _save_llama(tmp_path / "draft", seed=1)
    pair = load_pair(target, draft, device="cpu", dtype="bfloat16", draft_device="cpu", draft_dtype=torch.float32)
    assert next(pair.target.parameters()).dtype == torch.bfloat16
    assert next(pair.draft.parameters()).dtype == torch.float32
    assert pair.draft_device.type == "cpu"


# ------------------------------------------------------------------------------------------------
# load errors


def test_missing_local_directory(tmp_path: Path) -> None:
    good = _save_llama(tmp_path / "good")
    missing = tmp_path / "does-not-exist"
    with pytest.raises(ModelLoadError, match="not found"):
        load_pair(str(missing), str(good))
    with pytest.raises(ModelLoadError, match="not found"):
        load_pair(str(good), "./no/such/model/dir")


def test_directory_without_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="config.json"):
        resolve_model_dir(tmp_path / "empty")


def test_a_local_directory_with_pickled_weights_only_is_refused(tmp_path: Path) -> None:
    """A local folder, like a hub id, is loaded from safetensors only (a *.bin pickle runs code as it loads)."""
    good = _save_llama(tmp_path / "good")
    import shutil

    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    shutil.copytree(good, pickled)
    for weights in pickled.glob("*.safetensors"):  # the same weights, as the pickle a *.bin checkpoint is
        torch.save(load_file(weights), pickled / "pytorch_model.bin")
        weights.unlink()
    assert any(pickled.glob("*.bin")) and not any(pickled.glob("*.safetensors"))
    with pytest.raises(ModelLoadError, match="no safetensors weights"):
        load_pair(str(pickled), str(good))


def test_missing_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="GGUF"):
        resolve_model_dir(tmp_path / "nothing.gguf")


def test_unknown_hub_id_offline_fails_fast_with_instructions(offline: Path) -> None:
    good = _save_llama(offline / "good")
    start = time.perf_counter()
    with pytest.raises(ModelLoadError) as info:
        load_pair("specviz-test/definitely-not-cached-model", str(good))
    assert time.perf_counter() - start < 10  # no network retries
    message = str(info.value)
    assert "specviz-test/definitely-not-cached-model" in message
    assert "huggingface-cli download" in message and "HF_HOME" in message


def _put_in_hub_cache(hub_cache: Path, repo_id: str, model_dir: Path) -> None:
    """Lay a saved model out exactly as huggingface_hub's cache stores a downloaded snapshot."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(model_dir, repo / "snapshots" / commit)


def test_cached_hub_ids_load_offline(offline: Path) -> None:
    hub_cache = offline / "hf-home" / "hub"
    _put_in_hub_cache(hub_cache, "specviz-test/tiny-target", _save_llama(offline / "t", layers=2))
    _put_in_hub_cache(hub_cache, "specviz-test/tiny-draft", _save_llama(offline / "d", seed=1))
    pair = load_pair("specviz-test/tiny-target", "specviz-test/tiny-draft")
    assert pair.target.config.num_hidden_layers == 2
    assert pair.target_name == "specviz-test/tiny-target"


def test_incompatible_vocabulary(tmp_path: Path) -> None:
    target = _save_llama(tmp_path / "target")
    draft = _save_llama(tmp_path / "draft", reverse_vocab=True)
    with pytest.raises(IncompatiblePairError, match="map token ids differently"):
        load_pair(target, draft)


def test_sliding_window_is_rejected(tmp_path: Path) -> None:
    from transformers import MistralConfig

    good = _save_llama(tmp_path / "good")
    windowed = _save_config_only(
        tmp_path / "mistral",
        MistralConfig(vocab_size=33, sliding_window=16, max_position_embeddings=128, **TINY_DECODER),
    )
    with pytest.raises(IncompatiblePairError, match="sliding-window"):
        load_pair(windowed, good)


def test_disabled_sliding_window_is_accepted(tmp_path: Path) -> None:
    from transformers import Qwen2Config

    from specviz.models import _check_architecture

    config = Qwen2Config(
        vocab_size=33,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=False,
        sliding_window=16,
    )
    _check_architecture(config, "qwen2-full")  # Qwen2 ships a window size but switches it off
    config = Qwen2Config(
        vocab_size=33,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=1,
    )
    with pytest.raises(IncompatiblePairError):
        _check_architecture(config, "qwen2-windowed")


def test_mixed_layer_types_are_rejected(tmp_path: Path) -> None:
    from transformers import LlamaConfig

    from specviz.models import _check_architecture

    config = LlamaConfig(vocab_size=33, hidden_size=32, num_hidden_layers=2)
    config.layer_types = ["full_attention", "sliding_attention"]
    with pytest.raises(IncompatiblePairError, match="sliding_attention"):
        _check_architecture(config, "hybrid")


def test_recurrent_model_is_rejected(tmp_path: Path) -> None:
    from transformers import MambaConfig

    good = _save_llama(tmp_path / "good")
    mamba = _save_config_only(tmp_path / "mamba", MambaConfig(vocab_size=33, hidden_size=32, num_hidden_layers=1))
    with pytest.raises(IncompatiblePairError, match="recurrent"):
        load_pair(good, mamba)


def test_encoder_decoder_is_rejected(tmp_path: Path) -> None:
    from transformers import T5Config

    good = _save_llama(tmp_path / "good")
    t5 = _save_config_only(tmp_path / "t5", T5Config(vocab_size=33, d_model=32, num_layers=1))
    with pytest.raises(IncompatiblePairError, match="encoder-decoder"):
        load_pair(t5, good)


# ------------------------------------------------------------------------------------------------
# feature heads


def test_load_pair_attaches_a_saved_feature_head(tmp_path: Path) -> None:
    target = _save_llama(tmp_path / "target", layers=2)
    draft = _save_llama(tmp_path / "draft", seed=1)
    plain = load_pair(target, draft)
    assert plain.feature_head is None
    head = FeatureHead.random(plain.target, seed=0, vocab=range(2, 20))
    head_dir = head.save(tmp_path / "head")
    pair = load_pair(str(target), str(draft), feature_head=str(head_dir))
    loaded = pair.feature_head
    assert isinstance(loaded, FeatureHead) and loaded.vocab.tolist() == list(range(2, 20))
    assert loaded._target[1] is pair.target.get_output_embeddings()  # bound to the loaded target
    features, ids = torch.randn(1, 3, 32, generator=torch.Generator().manual_seed(0)), torch.tensor([[2, 3, 4]])
    with torch.inference_mode():
        want, got = head.full_logits(head(features, ids)), loaded.full_logits(loaded(features, ids))
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)) and int(finite.sum()) == 3 * 18
    assert torch.allclose(want[finite], got[finite], atol=1e-2, rtol=1e-2)  # float16 file
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, proposer="feature", max_new_tokens=8, check_invariant=True))
    dec.start(pair.tokenizer.encode("hello there"))
    while not dec.finished:
        trace = dec.step()
        assert trace.proposer == "feature" and max(trace.invariant_max_abs_diff.values()) < 1e-4
    assert load_pair(target, draft, feature_head=head).feature_head is head  # a FeatureHead object too


def test_feature_head_for_another_target_is_refused(tmp_path: Path) -> None:
    target = _save_llama(tmp_path / "target")
    other = _save_llama(tmp_path / "other", seed=1)  # same shapes, other weights
    deeper = _save_llama(tmp_path / "deeper", layers=2)
    head_dir = FeatureHead.random(load_pair(target, other).target).save(tmp_path / "head")
    with pytest.raises(IncompatiblePairError, match="embedding weights differ"):
        load_pair(other, target, feature_head=head_dir)
    with pytest.raises(IncompatiblePairError, match="num_layers"):
        load_pair(deeper, target, feature_head=head_dir)
    with pytest.raises(ModelLoadError, match="cannot read a feature head"):
        load_pair(target, other, feature_head=tmp_path / "no-head-here")
    wrong_format = tmp_path / "wrong-format"
    wrong_format.mkdir()
    (wrong_format / "model.safetensors").write_bytes((head_dir / "model.safetensors").read_bytes())
    (wrong_format / "config.json").write_text('{"format": "something-else/1"}')
    with pytest.raises(ModelLoadError, match="not a specviz feature head"):
        load_pair(target, other, feature_head=wrong_format)
    with pytest.raises(TypeError, match="feature_head"):
        load_pair(target, other, feature_head=42)


# ------------------------------------------------------------------------------------------------
# the embedded default pair


def test_shipped_draft_is_small() -> None:
    files = [f for f in default_draft_dir().iterdir() if f.is_file()]
    assert any(f.suffix == ".safetensors" for f in files)
    assert sum(f.stat().st_size for f in files) <= 30_000_000


@pytest.mark.slow
def test_default_pair_loads_offline_and_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pair = load_default_pair()
    assert pair.target.config.num_hidden_layers == 30
    assert pair.draft.config.vocab_size == pair.target.config.vocab_size == len(pair.tokenizer) == 49152
    assert next(pair.draft.parameters()).dtype == torch.float32
    assert kernels.parameter_count(pair.draft) < 0.15 * kernels.parameter_count(pair.target)  # packed weights count
    ids = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = pair.target.generate(ids, max_new_tokens=24, do_sample=False)
        draft_out = pair.draft.generate(ids, max_new_tokens=12, do_sample=False)
    answer = pair.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
    assert pair.tokenizer.decode(draft_out[0, ids.shape[1] :], skip_special_tokens=True).strip()


@pytest.mark.slow
def test_gguf_conversion_is_cached_atomically(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from specviz.models import default_target_dir

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    messages: list[str] = []
    first = default_target_dir(progress=lambda m, f: messages.append(m))
    assert (first / "model.safetensors").is_file() and (first / "tokenizer_config.json").is_file()
    assert any("Convert" in m for m in messages)
    # Only the finished directory is left behind (the temporary one was renamed into place).
    assert [p.name for p in first.parent.iterdir()] == [first.name]
    start = time.perf_counter()
    assert default_target_dir() == first  # cached: no second conversion
    assert time.perf_counter() - start < 1.0


def test_draft_embedding_smaller_than_tokenizer_is_rejected(tmp_path: Path) -> None:
    from transformers import LlamaConfig

    target = _save_llama(tmp_path / "target")
    small = _save_config_only(
        tmp_path / "small",
        LlamaConfig(vocab_size=10, **TINY_DECODER),
    )
    with pytest.raises(IncompatiblePairError, match="embedding table of 10 rows"):
        load_pair(target, small)
