"""Training data for the feature-level draft head: the target's own generations *with its features*.

An EAGLE-style head (Li et al. 2024) reads the target's hidden state ``f_t`` at position t and
the embedding of token t+1, and predicts ``f_{t+1}``; the target's frozen output head turns the
prediction into a distribution for token t+2. So its training data is, per sequence:

* ``ids``   [T] int32  -- prompt + the target's continuation (greedy or sampled at T=1);
* ``feats`` [T, H] fp16 -- the target's final hidden state (after its last norm: the very input
  of its output head) at every position, from one teacher-forced pass over the sequence;
* ``lse``   [T] fp32  -- log-sum-exp of the target's logits there, so that the target's exact
  probability of any token subset is ``exp(lm_head(f)[S] - lse)`` without storing 49k floats
  per position (the soft labels of a trimmed-vocabulary head come for free).

Shards are written atomically and skipped when present, so a killed run resumes where it stopped;
``--workers/--worker`` split the shards between processes. The same shards can label an
independent draft (the full distribution is ``softmax(lm_head(f))``).

    python scripts/feature_data.py --workers 2 --worker 0 &
    python scripts/feature_data.py --workers 2 --worker 1 &
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from train_draft import encode_prompts, load_target, log, pick_device, read_prompts  # noqa: E402

WORK = Path(os.environ.get("SPECVIZ_FEATURE_WORK", ROOT / "work-data" / "feature"))
DATA = WORK / "data"
SEED = 1


@torch.no_grad()
def continue_prompts(model, tok, prompt_ids: list[list[int]], max_new: int, greedy: bool, seed: int) -> list[list[int]]:
    """The target's continuations (left-padded batch generate), cut after the first EOS."""
    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    attn = torch.zeros_like(input_ids)
    for i, p in enumerate(prompt_ids):
        input_ids[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=input_ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new,
        do_sample=not greedy, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad,
    )
    rows = []
    for g in out[:, width:].tolist():
        n = next((j + 1 for j, t in enumerate(g) if t == tok.eos_token_id), len(g))
        rows.append(g[:n])
    return rows


@torch.no_grad()
def features_of(model, sequences: list[list[int]]) -> list[dict]:
    """One teacher-forced, right-padded pass: post-norm features and logits' log-sum-exp."""
    device = next(model.parameters()).device
    width = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    hidden = model.model(input_ids=ids.to(device), attention_mask=attn.to(device)).last_hidden_state  # [B, T, H]
    rows = []
    for i, s in enumerate(sequences):
        h = hidden[i, : len(s)]  # [T, H]
        lse = torch.logsumexp(model.lm_head(h).float(), dim=-1)  # [T]
        rows.append({"ids": torch.tensor(s, dtype=torch.int32), "feats": h.to(torch.float16).cpu(),
                     "lse": lse.cpu()})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--max-batches", type=int, default=0,
                    help="stop after this many shard indices (0 = all prompts once)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    DATA.mkdir(parents=True, exist_ok=True)
    model, tok = load_target(pick_device())
    prompts = [r["prompt"] for r in read_prompts("train")]
    order = list(range(len(prompts)))
    random.Random(SEED).shuffle(order)
    n_batches = args.max_batches or math.ceil(len(order) / args.batch)
    t_start, made = time.perf_counter(), 0
    for b in range(n_batches):
        shard = DATA / f"shard-{b:05d}.pt"
        if shard.exists() or b % args.workers != args.worker:
            continue
        idx = order[b * args.batch : (b + 1) * args.batch]
        greedy = b % 2 == 0  # half greedy (the T=0 path), half sampled at T=1
        t0 = time.perf_counter()
        encoded = encode_prompts(tok, [prompts[i] for i in idx])
        conts = continue_prompts(model, tok, encoded, args.max_new, greedy, seed=SEED * 1_000_003 + b)
        rows = features_of(model, [p + c for p, c in zip(encoded, conts, strict=True)])
        for r, p, i in zip(rows, encoded, idx, strict=True):
            r["num_prompt"], r["prompt_index"] = len(p), i
        tmp = shard.with_suffix(".tmp")
        torch.save({"rows": rows, "greedy": greedy}, tmp)
        os.replace(tmp, shard)  # atomic: a killed run never leaves half a shard
        n_tok = sum(len(c) for c in conts)
        made += n_tok
        log(f"shard {b}/{n_batches}: {len(rows)} prompts, {n_tok} generated tokens in {time.perf_counter() - t0:.0f}s "
            f"(this worker {made} tokens, {made / (time.perf_counter() - t_start):.0f} tok/s)")


if __name__ == "__main__":
    main()
