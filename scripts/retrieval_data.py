"""The retrieval proposer's datastore: the target's own answers, as token ids.

Retrieval drafting (REST, He et al. 2023; SuffixDecoding) guesses the next tokens by finding the
current context's suffix in text the target wrote before and copying what followed it. The text
is the target's own: its answers, greedy and sampled at T=1, to the diverse training prompts
(``assets/prompts/diverse.jsonl`` and ``train.jsonl``, the same recipe as the learned proposers'
data, ``scripts/feature_data.py``) -- never to the natural held-out prompts
(``assets/prompts/natural.jsonl``) or ``heldout.jsonl``, on which the proposer is measured.

    python scripts/retrieval_data.py generate [--workers 2 --worker 0]   # shards, resumable
    python scripts/retrieval_data.py status
    python scripts/retrieval_data.py build [--max-tokens N]   # -> assets/retrieval/store.npz + README.md

Shards (``work-data/retrieval/shard-*.pt``) are written atomically and skipped when present, so
a killed run resumes where it stopped. Even shards are greedy, odd ones sampled at T=1.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from training_common import left_padded  # noqa: E402

from specviz.prompting import chat_ids  # noqa: E402

WORK = Path(os.environ.get("SPECVIZ_RETRIEVAL_WORK", ROOT / "work-data" / "retrieval"))
SOURCES = ("diverse.jsonl", "train.jsonl")
SEED = 7
BATCH = 64
MAX_NEW = 160


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def prompts() -> list[dict]:
    """Every training prompt (as chat messages), in a fixed shuffled order."""
    rows = []
    for name in SOURCES:
        for line in (ROOT / "assets" / "prompts" / name).read_text().splitlines():
            row = json.loads(line)
            rows.append({"id": row["id"], "messages": row.get("messages") or [
                {"role": "user", "content": row["prompt"]}]})
    random.Random(SEED).shuffle(rows)
    return rows


def shard_path(b: int) -> Path:
    return WORK / f"shard-{b:05d}.pt"


@torch.inference_mode()
def answer(model, tok, prompt_ids: list[list[int]], greedy: bool, seed: int) -> list[list[int]]:
    """Left-padded batch generate; each answer up to and including its end-of-text token."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids, attn = left_padded(prompt_ids, pad)
    width = ids.shape[1]
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=MAX_NEW, do_sample=not greedy,
                         temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad)
    answers = []
    for row in out[:, width:].tolist():
        n = next((j + 1 for j, t in enumerate(row) if t == tok.eos_token_id), len(row))
        answers.append(row[:n])
    return answers


def cmd_generate(args: argparse.Namespace) -> None:
    from specviz import load_default_pair

    torch.set_num_threads(args.threads)
    WORK.mkdir(parents=True, exist_ok=True)
    pair = load_default_pair(dtype=args.dtype)
    tok = pair.tokenizer
    rows = prompts()
    n_shards = math.ceil(len(rows) / BATCH)
    made, t_start = 0, time.perf_counter()
    for b in range(n_shards):
        if shard_path(b).exists() or b % args.workers != args.worker:
            continue
        batch = rows[b * BATCH:(b + 1) * BATCH]
        prompt_ids = [chat_ids(tok, r["messages"]) for r in batch]
        greedy = b % 2 == 0
        answers = answer(pair.target, tok, prompt_ids, greedy, SEED * 1_000_003 + b)
        tmp = shard_path(b).with_suffix(".tmp")
        torch.save({"greedy": greedy, "rows": [{"id": r["id"], "prompt": p, "answer": a}
                                               for r, p, a in zip(batch, prompt_ids, answers, strict=True)]}, tmp)
        os.replace(tmp, shard_path(b))
        made += sum(len(a) for a in answers)
        done = len(list(WORK.glob("shard-*.pt")))
        log(f"shard {b} ({'greedy' if greedy else 'T=1'}): {done}/{n_shards} shards; this run {made:,} tokens, "
            f"{made / (time.perf_counter() - t_start):.0f} tok/s")


def cmd_status(_: argparse.Namespace) -> None:
    shards = sorted(WORK.glob("shard-*.pt"))
    tokens = sum(len(r["answer"]) for s in shards for r in torch.load(s)["rows"])
    log(f"{len(shards)} of {math.ceil(len(prompts()) / BATCH)} shards, {tokens:,} answer tokens")


def texts(max_tokens: int = 0) -> list[list[int]]:
    """Each answer with the few prompt tokens that open it (the assistant header), shard order."""
    from specviz.engine import TEXT_OPENING

    out, total = [], 0
    for shard in sorted(WORK.glob("shard-*.pt")):
        for row in torch.load(shard)["rows"]:
            text = list(row["prompt"][-TEXT_OPENING:]) + list(row["answer"])
            out.append(text)
            total += len(text)
            if max_tokens and total >= max_tokens:
                return out
    return out


def build_store(max_tokens: int = 0):
    """A SuffixStore over the generated answers (the first `max_tokens` tokens, 0: all)."""
    import numpy as np

    from specviz.suffix_store import SuffixStore

    docs = texts(max_tokens)
    return SuffixStore(np.concatenate([np.asarray(d, dtype=np.int64) for d in docs])), len(docs)


def cmd_build(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    store, n_docs = build_store(args.max_tokens)
    out = ROOT / "assets" / "retrieval"
    out.mkdir(parents=True, exist_ok=True)
    store.save(out / "store.npz")
    seconds = time.perf_counter() - t0
    size = (out / "store.npz").stat().st_size
    shards = sorted(WORK.glob("shard-*.pt"))
    greedy = sum(torch.load(s)["greedy"] for s in shards)
    (out / "README.md").write_text(CARD.format(tokens=len(store), docs=n_docs, mb=size / 1e6, seconds=seconds,
                                                shards=len(shards), greedy=greedy, sampled=len(shards) - greedy))
    log(f"{len(store):,} tokens from {n_docs} answers -> {out / 'store.npz'} ({size / 1e6:.1f} MB, {seconds:.0f} s)")


CARD = """# Retrieval datastore (`store.npz`)

The retrieval proposer's memory (docs/design.md §1b, `specviz/suffix_store.py`): token ids of the
default target's (SmolLM2-135M-Instruct) own answers, and their suffix array.

| | |
|---|---|
| tokens | {tokens:,} (uint16 ids; each answer opened by its 3-token assistant header) |
| answers | {docs:,}, from {shards} shards of 64 prompts ({greedy} greedy, {sampled} sampled at T=1) |
| file | {mb:.1f} MB (`tokens` uint16 + `suffixes` int32, numpy `savez_compressed`) |
| build | {seconds:.0f} s for the suffix array (prefix doubling) |

**Source.** The target answered the diverse training prompts (`assets/prompts/diverse.jsonl`,
`train.jsonl`: the learned proposers' data recipe), up to 160 new tokens each, in bfloat16 on the CPU.
Never the natural held-out prompts (`natural.jsonl`) or `heldout.jsonl`: the proposer is measured there.

**Reproduce.** `python scripts/retrieval_data.py generate` (resumable shards under
`work-data/retrieval/`), then `python scripts/retrieval_data.py build`.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("--workers", type=int, default=1)
    gen.add_argument("--worker", type=int, default=0)
    gen.add_argument("--threads", type=int, default=1)
    gen.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    sub.add_parser("status")
    build = sub.add_parser("build")
    build.add_argument("--max-tokens", type=int, default=0, help="use only the first N tokens (0: all)")
    args = ap.parse_args()
    {"generate": cmd_generate, "status": cmd_status, "build": cmd_build}[args.cmd](args)


if __name__ == "__main__":
    main()
