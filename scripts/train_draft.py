"""Distil the embedded default draft model from the default target (SmolLM2-135M-Instruct).

Speculative decoding is only as fast as the draft is *agreeable*: each drafted token is kept with
probability ``min(1, p/q)``, so the expected acceptance per token is
``alpha = E[sum_x min(p(x), q(x))]`` (Leviathan et al. 2023, sec. 3.1), and the draft must also be
cheap (cost ratio ``c`` = draft time per token / target time per token). No small model with
SmolLM2's tokenizer ships offline, so this script trains one by **knowledge distillation on the
target's own generations** (as in DistillSpec, Zhou et al. 2023): the target answers a few
thousand chat prompts, we keep its top-k next-token distributions at every generated position as
soft labels, and train a narrow 2-layer Llama to match them by KL divergence.

Sub-commands (all seeded and resumable; a GPU is used where present):

    python scripts/train_draft.py data    # target generations + top-k soft labels, in shards
    python scripts/train_draft.py train   # KL training, resumes from the latest checkpoint
    python scripts/train_draft.py eval    # alpha, greedy agreement, cost ratio -> JSON
    python scripts/train_draft.py export  # fp16 safetensors + config into assets/draft

Everything bulky (shards, checkpoints, logs) lives under ``work-data/draft`` (git-ignored).

The soft-label loss: with the target's top-k probabilities ``p_1..p_k`` and the tail mass
``p_tail = 1 - sum p_i`` (the rest of the vocabulary, lumped), and the draft's ``q``, we minimise
the KL divergence of the (k+1)-bin coarse-grained distributions,
``-sum_i p_i log q_i - p_tail log(1 - sum_i q_i)`` (+ the constant entropy of p). The draft is
pushed to put the target's top-k mass where the target does *and* to leave the right amount of
mass elsewhere, which a renormalised top-k target would not ask for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORK = Path(os.environ.get("SPECVIZ_DRAFT_WORK", ROOT / "work-data" / "draft"))
DATA = WORK / "data"
CKPT = WORK / "ckpt"
PROMPTS = ROOT / "assets" / "prompts"
EXPORT = ROOT / "assets" / "draft"
SEED = 0
TOPK = 32


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)


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


def encode_prompts(tok, prompts: list[str]) -> list[list[int]]:
    out = []
    for p in prompts:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out.append(list(ids))
    return out


# ----------------------------------------------------------------------------------------------
# data: target generations with top-k soft labels


class TopKRecorder:
    """A logits processor that records the target's top-k next-token distribution at each step.

    It sees the raw logits (no warpers are configured: temperature 1, top_k 0, top_p 1), i.e. the
    exact distribution the target samples from, and returns them unchanged.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.ids: list[torch.Tensor] = []
        self.probs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float(), dim=-1)
        top = probs.topk(self.k, dim=-1)  # [B, k]
        self.ids.append(top.indices.to(torch.int32).cpu())
        self.probs.append(top.values.to(torch.float16).cpu())
        return scores


@torch.no_grad()
def generate_batch(model, tok, prompt_ids: list[list[int]], max_new: int, greedy: bool, seed: int):
    from transformers import LogitsProcessorList

    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    attn = torch.zeros_like(input_ids)
    for i, p in enumerate(prompt_ids):  # left padding, so every row's next token is at the end
        input_ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    rec = TopKRecorder(TOPK)
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attn.to(device),
        max_new_tokens=max_new,
        do_sample=not greedy,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        logits_processor=LogitsProcessorList([rec]),
        pad_token_id=pad,
    )
    gen = out[:, width:].cpu()  # [B, T]
    ids = torch.stack(rec.ids, dim=1)  # [B, T, k]
    probs = torch.stack(rec.probs, dim=1)
    eos = tok.eos_token_id
    rows = []
    for i, p in enumerate(prompt_ids):
        g = gen[i].tolist()
        n = len(g)
        for j, t in enumerate(g):
            if t == eos:
                n = j + 1  # keep the EOS prediction itself: the draft must learn to stop
                break
        rows.append(
            {
                "prompt": torch.tensor(p, dtype=torch.int32),
                "gen": torch.tensor(g[:n], dtype=torch.int32),
                "topk_ids": ids[i, :n].clone(),
                "topk_probs": probs[i, :n].clone(),
            }
        )
    return rows


def cmd_data(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    DATA.mkdir(parents=True, exist_ok=True)
    device = pick_device()
    model, tok = load_target(device)
    prompts = [r["prompt"] for r in read_prompts("train")]
    order = list(range(len(prompts)))
    random.Random(SEED).shuffle(order)
    n_batches = math.ceil(len(order) / args.batch)
    total_tokens = sum(int(f.stat().st_size > 0) for f in DATA.glob("shard-*.pt"))
    t_start, made = time.perf_counter(), 0
    for b in range(args.max_batches or 10**9):
        shard = DATA / f"shard-{b:05d}.pt"
        if shard.exists():
            continue
        epoch, bi = divmod(b, n_batches)
        idx = order[bi * args.batch:(bi + 1) * args.batch]
        greedy = b % 4 == 3  # a quarter greedy continuations: the greedy path is decoded too
        t0 = time.perf_counter()
        rows = generate_batch(
            model, tok, encode_prompts(tok, [prompts[i] for i in idx]), args.max_new, greedy,
            seed=SEED * 1_000_003 + b,
        )
        for r, i in zip(rows, idx, strict=True):
            r["prompt_index"] = i
        tmp = shard.with_suffix(".tmp")
        torch.save({"rows": rows, "greedy": greedy, "epoch": epoch}, tmp)
        os.replace(tmp, shard)  # atomic: a killed run never leaves half a shard
        n_tok = sum(len(r["gen"]) for r in rows)
        made += n_tok
        dt = time.perf_counter() - t0
        log(
            f"data shard {b}: {len(rows)} prompts, {n_tok} tokens in {dt:.0f}s "
            f"({n_tok / dt:.0f} tok/s; this run {made} tokens, "
            f"{made / (time.perf_counter() - t_start):.0f} tok/s avg)"
        )
    del total_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data", help="generate target continuations + top-k soft labels")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--max-batches", type=int, default=0, help="stop after this shard index (0: all)")
    p.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    {"data": cmd_data}[args.cmd](args)


if __name__ == "__main__":
    main()
