"""What the training scripts share: the target model, the device, the prompt splits, a log line.

scripts/train_draft.py, feature_data.py, train_feature_head.py and probe_layer_fusion.py load the
embedded target the same way (fp32 unless asked, on the GPU when there is one) and read the same
prompt splits (assets/prompts/*.jsonl, built by scripts/build_prompts.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "assets" / "prompts"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def left_padded(prompt_ids: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of prompts for `generate`, padded on the left: (input ids, attention mask) [B, width]."""
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompt_ids):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    return ids, attn


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_target(device: torch.device, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specviz.models import default_target_dir

    path = default_target_dir(progress=lambda m, f: log(m))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    return model, tok


def read_prompts(split: str) -> list[dict]:
    with open(PROMPTS / f"{split}.jsonl") as f:
        return [json.loads(line) for line in f]


def benchmarks() -> dict:
    """docs/benchmarks.json (empty before the suite has run): the model cards quote it."""
    path = ROOT / "docs" / "benchmarks.json"
    return json.loads(path.read_text()) if path.exists() else {}


def quality_table(rows: list[dict], by_proposer: bool) -> list[str]:
    """A model card's table of bench.quality's rows: natural vs template prompts, one line per dtype,
    (proposer,) tree shape and temperature."""
    fmt = lambda x, f=".3f": "—" if x is None else format(x, f)  # noqa: E731
    key_of = lambda r: (r["dtype"], *((r["proposer"],) if by_proposer else ()), r["shape"], r["temperature"])  # noqa: E731
    lines = [
        "| dtype | " + ("proposer | " if by_proposer else "") + "shape | T | natural tokens/verify "
        "| template tokens/verify | natural acceptance | template acceptance | natural α | template α |",
        "|---|" + ("---|" if by_proposer else "") + "---|" + "---:|" * 7,
    ]
    for key in sorted({key_of(r) for r in rows}):
        got = {r["set"]: r for r in rows if key_of(r) == key}
        nat, tem = got.get("natural", {}), got.get("template", {})
        lines.append("| " + " | ".join(map(str, key[:-1])) + f" | {key[-1]:g} | "
                     f"{fmt(nat.get('tokens_per_verify'), '.2f')} | {fmt(tem.get('tokens_per_verify'), '.2f')} | "
                     f"{fmt(nat.get('acceptance_rate'))} | {fmt(tem.get('acceptance_rate'))} | "
                     f"{fmt(nat.get('alpha'))} | {fmt(tem.get('alpha'))} |")
    return lines
