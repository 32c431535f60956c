"""Training data for the learned proposers: the target's own generations *with its features*.

An EAGLE-style head (Li et al. 2024) reads the target's hidden state ``f_t`` at position t and
the embedding of token t+1, and predicts ``f_{t+1}``; the target's frozen output head turns the
prediction into a distribution for token t+2. So its training data is, per sequence:

* ``ids``   [T] int32  -- prompt + the target's continuation (greedy or sampled at T=1);
* ``feats`` [T, H] fp16 -- the target's final hidden state (after its last norm: the very input
  of its output head) at every position;
* ``lse``   [T] fp32  -- log-sum-exp of the target's logits there, so that the target's exact
  probability of any token subset is ``exp(lm_head(f)[S] - lse)`` without storing 49k floats
  per position. The same shards label an independent draft model (its full distribution is
  ``softmax(lm_head(f))``).

**The features come from the generation itself.** A forward hook on the target's final norm
records its output during ``generate``: the prefill gives the prompt's features, every decode
step the fed token's. No second, teacher-forced pass is needed (it cost as much as generating).

**Prompts** (``scripts/diverse_prompts.py``): the template set (``assets/prompts/train.jsonl``) and
prompts that are not template-built, in three phases, each a list of shards:

1. ``asks``  -- the target writes user prompts of many forms about many subjects (short answers);
2. ``main``  -- template prompts, paragraph tasks, hand-written standalone prompts and the prompts
   the target wrote in phase 1 (filtered, deduplicated, never near a natural held-out prompt);
3. ``turns`` -- two-turn conversations: a phase-2 prompt, the target's own answer, a follow-up;
4. ``again`` -- phase 2's prompts that are not template-built, answered once more in the other
   mode (a prompt answered greedily there is sampled at T=1 here, and the other way round), so
   the natural-like prompts weigh more; a prompt held out for validation in phase 2 stays out.

Half the shards are greedy (the T=0 path), half sampled at T=1. **bfloat16** by default: on a CPU
with AMX-BF16 a batched decode step runs ~1.7-2x faster than float32 (measured with
``--measure``); ``--dtype float32`` where it is not. Shards are written atomically and skipped when
present, so a killed run resumes where it stopped; ``--workers/--worker`` split the shards between
processes (one thread each is fastest on a busy 2-core machine: a second busy-waiting thread
stalls under load).

    python scripts/feature_data.py --workers 2 --worker 0 &   # ~1.5 M generated tokens in all
    python scripts/feature_data.py --workers 2 --worker 1 &
    python scripts/feature_data.py --natural    # the natural held-out set's answers (validation only)
    python scripts/feature_data.py --status                    # progress of both
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import diverse_prompts as dp  # noqa: E402
from training_common import left_padded, load_target, log, pick_device, read_prompts  # noqa: E402

from specviz.prompting import chat_ids  # noqa: E402

WORK = Path(os.environ.get("SPECVIZ_FEATURE_WORK", ROOT / "work-data" / "feature"))
DATA = WORK / "data"
SEED = 1
BATCH = 64


@dataclass(frozen=True)
class Phase:
    name: str
    max_new: int
    first_index: int  # prompt_index of its first prompt (indices are unique across phases)


ASKS = Phase("asks", 40, 100_000)
MAIN = Phase("main", 160, 200_000)
TURNS = Phase("turns", 128, 300_000)
AGAIN = Phase("again", 160, 400_000)
VAL_EVERY = 50  # prompt_index % VAL_EVERY == 0 is held out (phases 1-3; see `held_out`)
N_ASKS, N_PARAGRAPH, N_TURNS = 2400, 2000, 1280
TURN_SOURCE_SHARDS = 24  # conversations continue answers from the first main shards


def shard_path(phase: Phase, b: int) -> Path:
    return DATA / f"shard-{phase.name}-{b:05d}.pt"


def encode(tok, row: dict) -> list[int]:
    return chat_ids(tok, row.get("messages") or [{"role": "user", "content": row["prompt"]}])


def length_sorted(rows: list[dict], tok, rng: random.Random) -> list[dict]:
    """Shuffled, then sorted by length inside windows of 8 batches: little padding, and any
    prefix of the shards is still a mix of every kind."""
    rng.shuffle(rows)
    for r in rows:
        r["_ids"] = encode(tok, r)
    window = 8 * BATCH
    out = []
    for i in range(0, len(rows), window):
        out += sorted(rows[i : i + window], key=lambda r: len(r["_ids"]))
    return out


# ---------------------------------------------------------------------------- the prompt lists


def asks_rows(tok) -> list[dict]:
    rng = random.Random(SEED)
    return length_sorted([{"prompt": p, "source": "asks"} for p in dp.asks(N_ASKS, rng)], tok, rng)


def wait_for(paths: list[Path], what: str) -> None:
    while missing := [p for p in paths if not p.exists()]:
        log(f"waiting for {len(missing)} {what} shards (another worker is writing them)")
        time.sleep(20)


def main_rows(tok) -> list[dict]:
    n_ask_shards = math.ceil(N_ASKS / BATCH)
    wait_for([shard_path(ASKS, b) for b in range(n_ask_shards)], "asks")
    held_out = dp.natural_word_sets()
    written = []
    for b in range(n_ask_shards):
        for r in torch.load(shard_path(ASKS, b))["rows"]:
            text = dp.extract_written_prompt(tok.decode(r["ids"][r["num_prompt"]:].tolist(), skip_special_tokens=True))
            if text:
                written.append(text)
    rng = random.Random(SEED + 1)
    m = dp.material()
    rows = [{"prompt": r["prompt"], "source": "template"} for r in read_prompts("train")]
    rows += [{"prompt": p, "source": "paragraph"} for p in dp.paragraph_prompts(N_PARAGRAPH, rng)]
    rows += [{"prompt": p, "source": "standalone"} for p in m["standalone"]]
    rows += [{"prompt": p, "source": "target-written"} for p in dp.dedupe(written, held_out)]
    return length_sorted(rows, tok, rng)


def turns_rows(tok, main: list[dict]) -> list[dict]:
    wait_for([shard_path(MAIN, b) for b in range(TURN_SOURCE_SHARDS)], "main")
    rng = random.Random(SEED + 2)
    sources = []
    for b in range(TURN_SOURCE_SHARDS):
        for r in torch.load(shard_path(MAIN, b))["rows"]:
            answer = r["ids"][r["num_prompt"]:].tolist()
            row = main[r["prompt_index"] - MAIN.first_index]
            if row["source"] != "paragraph" and 12 <= len(answer) < MAIN.max_new:  # a finished answer
                sources.append((row["prompt"], tok.decode(answer, skip_special_tokens=True)))
    follow = dp.followups()
    rows = [{"prompt": f, "messages": dp.conversation(p, a, f), "source": "conversation"}
            for (p, a), f in zip(rng.sample(sources, min(N_TURNS, len(sources))), rng.choices(follow, k=N_TURNS))]
    return length_sorted(rows, tok, rng)


def again_rows(main: list[dict]) -> list[dict]:
    """Phase 2's non-template prompts in the same order, minus those held out for validation
    there; each remembers the main shard it came from (`run_phase` flips that shard's mode)."""
    rows = []
    for i, r in enumerate(main):
        index = MAIN.first_index + i
        if r["source"] != "template" and not held_out_index(index):
            rows.append({**r, "main_shard": i // BATCH})
    return rows


def write_prompt_file(main: list[dict], turns: list[dict]) -> Path:
    """The non-template training prompts, for the record (and the held-out overlap test)."""
    out = dp.PROMPTS / "diverse.jsonl"
    rows = [r for r in main if r["source"] != "template"] + turns
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for i, r in enumerate(rows):
            rec = {"id": f"diverse-{i:05d}", "source": r["source"], "prompt": r["prompt"]}
            if "messages" in r:
                rec["messages"] = r["messages"]
            f.write(json.dumps(rec) + "\n")
    os.replace(tmp, out)
    return out


# ---------------------------------------------------------------------------- generation


@torch.inference_mode()
def generate_with_features(
    model, tok, prompt_ids: list[list[int]], max_new: int, greedy: bool, seed: int
) -> list[dict]:
    """Left-padded batch generate; the final norm's outputs are recorded on the way."""
    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    input_ids, attn = left_padded(prompt_ids, pad)
    width = input_ids.shape[1]
    recorded: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_hook(lambda _m, _i, out: recorded.append(out))
    try:
        torch.manual_seed(seed)
        out = model.generate(
            input_ids=input_ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new,
            do_sample=not greedy, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad,
        )
    finally:
        hook.remove()
    feats = torch.cat(recorded, dim=1)  # [B, width + fed decode steps, H]
    rows = []
    for i, (p, g) in enumerate(zip(prompt_ids, out[:, width:].tolist(), strict=True)):
        n = next((j + 1 for j, t in enumerate(g) if t == tok.eos_token_id), len(g))
        length = min(len(p) + n, feats.shape[1] - (width - len(p)))  # the last token was never fed
        f = feats[i, width - len(p): width - len(p) + length]
        lse = torch.cat([torch.logsumexp(model.lm_head(c).float(), dim=-1) for c in f.split(256)])
        rows.append({"ids": torch.tensor((p + g[:n])[:length], dtype=torch.int32),
                     "feats": f.to(torch.float16).cpu(), "lse": lse.cpu(), "num_prompt": len(p)})
    return rows


def run_phase(model, tok, phase: Phase, rows: list[dict], args, progress: dict) -> None:
    n_shards = math.ceil(len(rows) / BATCH)
    for b in range(n_shards):
        shard = shard_path(phase, b)
        if shard.exists() or b % args.workers != args.worker:
            continue
        batch = rows[b * BATCH : (b + 1) * BATCH]
        greedy = b % 2 == 0  # half greedy (the T=0 path), half sampled at T=1
        if phase is AGAIN:  # the mode the prompts' first answers did not have (by batch majority)
            greedy = sum(r["main_shard"] % 2 for r in batch) * 2 >= len(batch)
        t0 = time.perf_counter()
        out = generate_with_features(model, tok, [r["_ids"] for r in batch], phase.max_new, greedy,
                                     seed=SEED * 1_000_003 + phase.first_index + b)
        for j, (r, src) in enumerate(zip(out, batch, strict=True)):
            r["prompt_index"] = phase.first_index + b * BATCH + j
            r["source"] = src["source"]
        tmp = shard.with_suffix(".tmp")
        torch.save({"rows": out, "greedy": greedy, "phase": phase.name, "dtype": args.dtype}, tmp)
        os.replace(tmp, shard)  # atomic: a killed run never leaves half a shard
        made = sum(len(r["ids"]) - r["num_prompt"] for r in out)
        progress["tokens"] += made
        rate = progress["tokens"] / (time.perf_counter() - progress["t0"])
        done = len(list(DATA.glob(f"shard-{phase.name}-*.pt")))
        bar = "#" * (20 * done // n_shards) + "." * (20 - 20 * done // n_shards)
        log(f"{phase.name} [{bar}] shard {done}/{n_shards}: {made} tokens in {time.perf_counter() - t0:.0f}s "
            f"(this worker {progress['tokens']:,} tokens, {rate:.0f} tok/s)")


def natural_eval(model, tok, args) -> None:
    """The natural held-out prompts answered greedily and at T=1, for validation curves only
    (``WORK/natural``: never read by training, only by its held-out measurements)."""
    out_dir = WORK / "natural"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = dp.read_jsonl(dp.PROMPTS / "natural.jsonl")
    per_shard = math.ceil(len(rows) / 3)
    for b in range(6):
        greedy = b < 3
        path = out_dir / f"shard-{b:05d}.pt"
        batch = rows[(b % 3) * per_shard : (b % 3 + 1) * per_shard]
        if path.exists() or not batch:
            continue
        out = generate_with_features(model, tok, [encode(tok, r) for r in batch], 128, greedy, seed=SEED + b)
        for j, r in enumerate(out):
            r["prompt_index"], r["source"] = (b % 3) * per_shard + j, "natural"
        torch.save({"rows": out, "greedy": greedy, "phase": "natural", "dtype": args.dtype}, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)
        log(f"natural held-out shard {b + 1}/6 ({'greedy' if greedy else 'T=1'})")


def held_out_index(index: int) -> bool:
    """Whether the prompt at `index` is held out for validation: every VAL_EVERY-th prompt of phases
    1-3. Phase 4 repeats phase 2's training prompts (its held-out ones are left out of it), so all of
    it is trained on."""
    return index % VAL_EVERY == 0 and index < AGAIN.first_index


def held_out(row: dict) -> bool:
    """A validation row of the training mix (`held_out_index` of its prompt)."""
    return held_out_index(row["prompt_index"])


def shard_caps() -> str:
    """The phase caps of a command that regenerates the shards present (each phase up to its highest
    shard), for the model cards' reproduce blocks."""
    def upto(phase: Phase) -> int:
        return max((int(p.stem.rsplit("-", 1)[1]) + 1 for p in DATA.glob(f"shard-{phase.name}-*.pt")), default=0)
    return f"--main-shards {upto(MAIN)} --turn-shards {upto(TURNS)} --again-shards {upto(AGAIN)}"


def status() -> None:
    total = 0
    for path in sorted(DATA.glob("shard-*.pt")):
        total += sum(len(r["ids"]) - r["num_prompt"] for r in torch.load(path)["rows"])
    per_phase = {p.name: len(list(DATA.glob(f"shard-{p.name}-*.pt"))) for p in (ASKS, MAIN, TURNS, AGAIN)}
    print(f"{total:,} generated tokens; shards per phase: {per_phase}")


@torch.inference_mode()
def measure(model32, model16, tok) -> None:
    """tokens/s of a batched decode step (batch 64, past 100) in float32 vs bfloat16."""
    ids = torch.randint(100, 5000, (BATCH, 100))
    for name, model in (("float32", model32), ("bfloat16", model16)):
        past = model(input_ids=ids, use_cache=True).past_key_values
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            model(input_ids=ids[:, :1], past_key_values=past, use_cache=True)
            times.append(time.perf_counter() - t0)
            past.crop(-1)
        ms = sorted(times)[2] * 1000
        print(f"{name}: {ms:.0f} ms per batched decode step, {BATCH / ms * 1000:.0f} tok/s "
              f"(threads {torch.get_num_threads()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--main-shards", type=int, default=0,
                    help="generate only the first N shards of the main phase (0 = all of it)")
    ap.add_argument("--turn-shards", type=int, default=0,
                    help="generate only the first N shards of the conversations phase (0 = all of it)")
    ap.add_argument("--again-shards", type=int, default=0,
                    help="generate only the first N shards of the answered-again phase (0 = all of it)")
    ap.add_argument("--natural", action="store_true",
                    help="answer the natural held-out prompts (validation curves only) and exit")
    ap.add_argument("--status", action="store_true", help="print the generated tokens so far and exit")
    ap.add_argument("--measure", action="store_true", help="time a batched decode step in both dtypes and exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.status:
        return status()
    DATA.mkdir(parents=True, exist_ok=True)
    device = pick_device()
    model, tok = load_target(device, getattr(torch, args.dtype))
    if args.measure:
        return measure(load_target(device, torch.float32)[0], load_target(device, torch.bfloat16)[0], tok)
    if args.natural:
        return natural_eval(model, tok, args)
    progress = {"tokens": 0, "t0": time.perf_counter()}
    run_phase(model, tok, ASKS, asks_rows(tok), args, progress)
    every_main = main_rows(tok)
    main_list = every_main[: args.main_shards * BATCH or None]
    run_phase(model, tok, MAIN, main_list, args, progress)
    turns = turns_rows(tok, main_list)[: args.turn_shards * BATCH or None]
    if args.worker == 0:
        log(f"wrote the non-template training prompts to {write_prompt_file(main_list, turns)}")
    run_phase(model, tok, TURNS, turns, args, progress)
    run_phase(model, tok, AGAIN, again_rows(every_main)[: args.again_shards * BATCH or None], args, progress)
    log(f"done: this worker generated {progress['tokens']:,} tokens")


if __name__ == "__main__":
    main()
