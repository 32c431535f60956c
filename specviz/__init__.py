"""specviz: watch exact speculative decoding happen, with a real decoder underneath.

Public API (docs/design.md §4):

    pair = specviz.load_default_pair()                 # offline embedded default pair
    pair = specviz.load_pair(target=..., draft=...)    # any HF pair (ids, dirs, GGUF files)
    head = specviz.FeatureHead.random(pair.target)     # an (untrained) EAGLE-style head
    cfg = specviz.DecodeConfig(proposer="feature")     # any name of the proposer table (proposers/registry.py)
    cfg = specviz.DecodeConfig(k=5, temperature=1.0, cache_layout="paged", page_size=16)
    cfg = specviz.DecodeConfig(k=4, tree_width=3, tree_nodes=16)   # a token tree of depth 4
    dec = specviz.SpeculativeDecoder(pair, cfg)
    dec.start(prompt_ids); trace = dec.step()          # one cycle -> CycleTrace
    run = specviz.load_run(text)                       # a recorded run, drawn without any model
    paged = specviz.replay_run(run, cache_layout="paged", page_size=4, free_policy="keep")
"""

from .autoregressive import AutoregressiveDecoder
from .config import DecodeConfig
from .engine import SpeculativeDecoder
from .errors import (
    CacheCapacityError,
    ConfigError,
    ContextFullError,
    DecodingFinishedError,
    IncompatiblePairError,
    ModelLoadError,
    PoolExhaustedError,
    PromptError,
    SpecvizError,
)
from .feature_head import FeatureHead
from .models import ModelPair, load_default_pair, load_pair
from .replay import ReplayError, replay_run
from .runfile import RunFileError, RunRecord, load_run, record_run, traces_from_json
from .tiny import build_tiny_pair
from .trace import CacheEvent, CacheSnapshot, CycleTrace, TreeNode, TreeTrace, traces_to_json
from .tree import TokenTree, TreeShape

__all__ = [
    "AutoregressiveDecoder", "CacheCapacityError", "CacheEvent", "CacheSnapshot", "ConfigError", "ContextFullError",
    "CycleTrace", "DecodeConfig", "DecodingFinishedError", "FeatureHead", "IncompatiblePairError", "ModelLoadError",
    "ModelPair", "PoolExhaustedError", "PromptError", "ReplayError", "RunFileError", "RunRecord", "SpecvizError",
    "SpeculativeDecoder", "TokenTree", "TreeNode", "TreeShape", "TreeTrace", "build_tiny_pair", "load_default_pair",
    "load_pair", "load_run", "record_run", "replay_run", "traces_from_json", "traces_to_json",
]
