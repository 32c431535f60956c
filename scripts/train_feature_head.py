"""Train the EAGLE-style feature head of the embedded default pair (``assets/feature_head``).

Data: ``scripts/feature_data.py`` shards -- the target's own generations on ``assets/prompts``
(half greedy, half sampled at T=1) with its post-norm features F and log-sum-exp at every position.

The head sees the pair (F[p], x[p+1]) at entry p and predicts F[p+1]; its (trimmed) output head
gives q for token x[p+2]. Two losses, as in EAGLE (Li et al. 2024):

* **distribution**: soft cross-entropy toward the target's exact distribution
  p = exp(W F[p+1] - lse[p+1]) restricted to the candidate vocabulary S (the mass outside S is a
  constant the head cannot reach: q = 0 there, and the residual restores it at decode time);
* **feature**: smooth-L1 between the predicted and the real F[p+1] -- what the head feeds itself
  when it drafts a second token.

Robustness levers: Gaussian noise on the input features, and an **unrolled second pass** in which
a random half of the input features are replaced by the head's own predictions (what drafting
beyond d_1 looks like), so later drafts are trained on the inputs they really get.

Sub-commands (seeded, resumable, progress logged; a GPU is used when present):

    python scripts/train_feature_head.py train --minutes 40   # resumes from work-data/feature/ckpt
    python scripts/train_feature_head.py export                 # fp16 safetensors -> assets/feature_head

The evaluation (acceptance, tokens per cycle, alpha, cost, speed) runs through the real decoder:
``python -m bench.proposers`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from feature_data import DATA, WORK, held_out, shard_caps  # noqa: E402
from train_draft import save_ckpt  # noqa: E402
from training_common import benchmarks, load_target, log, pick_device, quality_table  # noqa: E402

from specviz.feature_head import FeatureHead, _layer_config, target_fingerprint  # noqa: E402

CKPT = WORK / "ckpt"
CURVE = WORK / "curve.jsonl"  # one line per validation: steps, training tokens seen, held-out figures
EXPORT = ROOT / "assets" / "feature_head"
SEED = 0


# ----------------------------------------------------------------------------------------------
# data


def load_rows(seen: set[str], rows: list[dict]) -> int:
    """Append the rows of shards not seen yet; returns how many shards were new."""
    new = 0
    for path in sorted(DATA.glob("shard-*.pt")):
        if path.name in seen:
            continue
        try:
            shard = torch.load(path)
        except Exception:  # a shard being written right now: next time
            continue
        seen.add(path.name)
        rows.extend(shard["rows"])
        new += 1
    return new


def training_rows(rows: list[dict]) -> list[dict]:
    """The rows trained on (all but the training mix's held-out ones), sorted by length."""
    return sorted((r for r in rows if not held_out(r)), key=lambda r: len(r["ids"]))


def similar_lengths(by_length: list[dict], size: int, rng: random.Random) -> list[dict]:
    """A batch of `size` rows of neighbouring lengths from a random place: a batch is padded to its
    longest row, and random rows (a 40-token answer beside a 400-token paragraph task) made most
    of each batch padding."""
    start = rng.randrange(max(1, len(by_length) - size + 1))
    return by_length[start : start + size]


@torch.no_grad()
def candidate_vocab(target, rows: list[dict], size: int, eos_ids: list[int], max_rows: int = 400) -> list[int]:
    """The `size` tokens with the most target probability mass over generated positions (as
    FR-Spec's frequency ranking, but from the exact distributions: a token the target often
    gives 20 % without sampling it still counts), plus EOS."""
    weight = target.get_output_embeddings().weight
    mass = torch.zeros(weight.shape[0], device=weight.device)
    for r in random.Random(SEED).sample(rows, min(max_rows, len(rows))):
        start = max(0, r["num_prompt"] - 1)
        feats = r["feats"][start:].to(weight.device, weight.dtype)
        mass += torch.exp(feats @ weight.T - r["lse"][start:, None].to(weight.device)).float().sum(0)
    mass[list(eos_ids)] = float("inf")
    return sorted(mass.topk(size).indices.tolist())


def make_batch(rows: list[dict], device: torch.device):
    """Right-padded [B, T] ids, [B, T, H] features, [B, T] lse, [B, T] loss mask.

    Entry p predicts F[p+1] and token p+2, so it is trained where p+1 >= num_prompt - 1 (the
    prediction of the first generated token onward) and p+2 < T.
    """
    width = max(len(r["ids"]) for r in rows)
    hidden = rows[0]["feats"].shape[1]
    b = len(rows)
    ids = torch.zeros(b, width, dtype=torch.long)
    feats = torch.zeros(b, width, hidden)
    lse = torch.zeros(b, width)
    attn = torch.zeros(b, width, dtype=torch.long)
    mask = torch.zeros(b, width, dtype=torch.bool)
    for i, r in enumerate(rows):
        t = len(r["ids"])
        ids[i, :t] = r["ids"].long()
        feats[i, :t] = r["feats"].float()
        lse[i, :t] = r["lse"]
        attn[i, :t] = 1
        mask[i, max(0, r["num_prompt"] - 2) : t - 2] = True
    return ids.to(device), feats.to(device), lse.to(device), attn.to(device), mask.to(device)


# ----------------------------------------------------------------------------------------------
# model and loss


def init_head(target, vocab: list[int], copy_last_layer: bool = False) -> FeatureHead:
    """A head whose fusion starts as 'pass the feature through' and whose decoder layer starts
    small and random (so the first prediction is about the input feature itself), or as a copy
    of the target's last layer. Its final norm starts as the target's."""
    torch.manual_seed(SEED)
    head = FeatureHead(_layer_config(target), target_fingerprint(target), vocab, info={"trained": True})
    head.bind(target)
    with torch.no_grad():
        if copy_last_layer:
            head.decoder.layers[0].load_state_dict(target.model.layers[-1].state_dict())
        head.decoder.norm.weight.copy_(target.model.norm.weight)
        hidden = head.layer_config.hidden_size
        head.fuse.weight.normal_(0, 0.01)
        head.fuse.weight[:, :hidden] += torch.eye(hidden)
    return head


def losses(head: FeatureHead, ids, feats, lse, attn, mask, noise: float, unroll: int):
    """Distribution and feature losses (and per-depth agreement and α) for one batch.

    Pass 1 reads the target's real features. Passes 2..`unroll` are the training-time test of
    EAGLE-3: a random half of the input features are the previous pass's own predictions (what
    drafting d_2, d_3 ... really feeds the head), so deeper drafts are trained on the inputs they get.
    Later passes weigh 0.8x the one before.

    `feats` may be wider than the head (scripts/probe_layer_fusion.py: [F ; more target layers]):
    F is its first H columns, the only part predicted, and a prediction fed back carries zeros
    for the rest (a drafted position has no target layers)."""
    hidden = head.layer_config.hidden_size
    noisy = feats + noise * feats[..., :hidden].std() * torch.randn_like(feats) if noise else feats
    # entry p: input (F[p], x[p+1]) -> predicts F[p+1]; trained where mask[p]
    inputs_f, inputs_x = noisy[:, :-1], ids[:, 1:]
    target_f, target_lse = feats[:, 1:, :hidden], lse[:, 1:]
    m = mask[:, :-1]
    with torch.no_grad():
        p = torch.exp(head.candidate_logits(target_f[m]) - target_lse[m, None])  # [N, |S|] target probs on S
    out = {}
    total = 0.0
    previous = None
    for depth in range(1, max(1, unroll) + 1):
        if previous is None:
            features_in = inputs_f
        else:  # the previous pass's prediction of F[p] stands in for entry p's input, half the time
            fed_back = torch.nn.functional.pad(previous[:, :-1], (0, inputs_f.shape[-1] - hidden))
            shifted = torch.cat([inputs_f[:, :1], fed_back], dim=1)
            features_in = torch.where((torch.rand(m.shape, device=m.device) < 0.5)[..., None], shifted, inputs_f)
        predicted = head(features_in, inputs_x, attention_mask=attn[:, 1:])  # [B, T-1, H]
        logq = torch.log_softmax(head.candidate_logits(predicted[m]).float(), dim=-1)
        cls = -(p * logq).sum(-1).mean()
        reg = F.smooth_l1_loss(predicted[m], target_f[m])
        total = total + 0.8 ** (depth - 1) * (cls + reg)
        previous = predicted
        with torch.no_grad():
            q = logq.exp()
            out[f"step{depth}_agree"] = (q.argmax(-1) == p.argmax(-1)).float().mean().item()
            out[f"step{depth}_alpha"] = torch.minimum(p, q).sum(-1).mean().item()
            out[f"step{depth}_cls"] = cls.item()
    out["tokens"] = int(m.sum())
    return total, out


# ----------------------------------------------------------------------------------------------
# commands


def cmd_train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    device = pick_device()
    target, _tok = load_target(device)
    rows: list[dict] = []
    seen: set[str] = set()
    load_rows(seen, rows)
    ckpt_path = CKPT / "latest.pt"
    state = torch.load(ckpt_path, weights_only=False) if ckpt_path.exists() else None
    eos = [int(target.config.eos_token_id)]
    if state:
        vocab = state["vocab"]
        head = init_head(target, vocab)
    elif args.init_from:  # continue a shipped head on new data; its vocabulary, widened to --vocab
        shipped = FeatureHead.load(args.init_from, target)
        vocab = shipped.vocab.tolist()
        if args.vocab > len(vocab):  # the output rows are borrowed from the target: widening adds no weights
            ranked = [t for t in candidate_vocab(target, rows, args.vocab, eos) if t not in set(vocab)]
            vocab = sorted(vocab + ranked[: args.vocab - len(vocab)])
        head = init_head(target, vocab)
        head.load_state_dict(shipped.state_dict(), strict=False)
        log(f"starting from the head in {args.init_from} (|S| {len(shipped.vocab)} -> {len(vocab)})")
    else:
        vocab = candidate_vocab(target, rows, args.vocab, eos)
        head = init_head(target, vocab)
    head.train().requires_grad_(True)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    step, spent = 0, 0.0
    if state:
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        step, spent = state["step"], state["spent"]
        log(f"resumed at step {step} ({spent / 60:.1f} min spent)")
    budget = args.minutes * 60
    rng = random.Random(SEED + step)
    t_last_ckpt = time.time()
    log(f"{len(rows)} sequences from {len(seen)} shards; vocabulary |S| = {len(vocab)}; budget {args.minutes} min")
    tokens_seen = state.get("tokens_seen", 0) if state else 0
    by_length = training_rows(rows)
    while spent < budget:
        t0 = time.time()
        if step % 50 == 0 and load_rows(seen, rows):
            log(f"now {len(rows)} sequences from {len(seen)} shards")
            by_length = training_rows(rows)
        batch = make_batch(similar_lengths(by_length, args.batch, rng), device)
        frac = spent / budget
        lr = args.lr * min(1.0, (step + 1) / 10) * max(0.05, 1 - frac)  # warm-up, then linear decay to the deadline
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss, stats = losses(head, *batch, noise=args.noise, unroll=args.unroll)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += stats["tokens"]
        spent += time.time() - t0
        if step % 5 == 0:
            log(f"step {step} lr {lr:.2e} " + " ".join(f"{k} {v:.3f}" for k, v in stats.items())
                + f" ({spent / 60:.1f}/{args.minutes} min)")
        if time.time() - t_last_ckpt > args.val_minutes * 60 or spent >= budget:
            val = {"template": validate(head, [r for r in rows if held_out(r)], device),
                   "natural": validate(head, natural_rows(), device, limit=96)}
            for name, v in val.items():
                log(f"validation ({name}) " + " ".join(f"{k} {x:.3f}" for k, x in v.items() if k != "tokens"))
            with open(CURVE, "a") as f:
                f.write(json.dumps({"step": step, "minutes": round(spent / 60, 2), "tokens_seen": tokens_seen,
                                    "data_sequences": len(rows), **val}) + "\n")
            save_ckpt({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "spent": spent,
                       "vocab": vocab, "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                       "tokens_seen": tokens_seen}, CKPT)
            t_last_ckpt = time.time()
    log(f"done: {step} steps, {spent / 60:.1f} min")


@torch.no_grad()
def validate(head: FeatureHead, val_rows: list[dict], device: torch.device, limit: int = 48,
             batch_of=None) -> dict:
    """Per-depth agreement and α on held-out rows (in batches of 24, token-weighted); `batch_of`
    builds a batch from rows (default `make_batch`)."""
    val_rows = val_rows[:limit]
    if not val_rows:
        return {}
    head.eval()
    torch.manual_seed(SEED)
    sums: dict[str, float] = {}
    total = 0
    for i in range(0, len(val_rows), 24):
        rows = val_rows[i : i + 24]
        _, stats = losses(head, *(batch_of(rows) if batch_of else make_batch(rows, device)), noise=0.0, unroll=3)
        n = stats.pop("tokens")
        total += n
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + v * n
    head.train()
    return {k: v / total for k, v in sums.items()} | {"tokens": total}


def natural_rows() -> list[dict]:
    """The natural held-out prompts' answers (``feature_data.py --natural``): validation only."""
    rows: list[dict] = []
    for path in sorted((WORK / "natural").glob("shard-*.pt")):
        rows.extend(torch.load(path)["rows"])
    random.Random(SEED).shuffle(rows)  # greedy and T=1 answers mixed in any prefix
    return rows


@torch.no_grad()
def cmd_coverage(args: argparse.Namespace) -> None:
    """How much of the target's probability mass a trimmed vocabulary of each size keeps, on the
    template validation rows and on the natural held-out rows (generated positions)."""
    target, _tok = load_target(torch.device("cpu"))
    rows: list[dict] = []
    load_rows(set(), rows)
    train_rows = [r for r in rows if not held_out(r)]
    sets = {"template validation": [r for r in rows if held_out(r)], "natural": natural_rows()}
    weight = target.get_output_embeddings().weight
    for size in args.sizes:
        vocab = torch.tensor(candidate_vocab(target, train_rows, size, [int(target.config.eos_token_id)]))
        parts = []
        for name, val in sets.items():
            kept = []
            for r in val[:96]:
                f = r["feats"][r["num_prompt"] - 1:].float()
                kept.append(torch.exp(f @ weight[vocab].T - r["lse"][r["num_prompt"] - 1:, None]).sum(-1))
            parts.append(f"{name} {torch.cat(kept).mean():.4f}")
        log(f"|S| = {size}: mass kept " + ", ".join(parts))


def cmd_export(args: argparse.Namespace) -> None:
    device = torch.device("cpu")
    target, _tok = load_target(device)
    state = torch.load(CKPT / "latest.pt", weights_only=False)
    head = init_head(target, state["vocab"])
    head.load_state_dict(state["head"])
    # Kept from the shipped head: the card's choice of the app's proposer (until a card measures again)
    # and the history of the runs this checkpoint continues.
    shipped = args.out / "config.json"
    old = json.loads(shipped.read_text())["info"] if shipped.exists() else {}
    head.info.update({
        **{k: old[k] for k in ("preferred_over_draft", "continued_from") if k in old},
        "trained": True,
        "steps": state["step"],
        "train_minutes": round(state["spent"] / 60, 1),
        "train_args": state["args"],
        "vocab_size": len(state["vocab"]),
    })
    head.save(args.out)
    log(f"exported to {args.out}")


def train_flags(args: dict) -> str:
    """The train command's flags as they were given (the card's reproduce line)."""
    flags = [f"--minutes {args.get('minutes', 40)}", f"--threads {args.get('threads', 1)}",
             f"--lr {args.get('lr', 1e-3)}", f"--batch {args.get('batch', 16)}", f"--unroll {args.get('unroll', 3)}"]
    if args.get("init_from"):
        flags.insert(0, f"--init-from {args['init_from']}")
    if args.get("bf16"):
        flags.append("--bf16")
    return " ".join(flags)


def curve_rows(every: int = 6) -> list[str]:
    """Rows of the held-out curve table from CURVE (every `every`-th validation, and the last)."""
    if not CURVE.exists():
        return []
    points = [json.loads(line) for line in CURVE.read_text().splitlines() if line.strip()]
    keep = points[::every] + (points[-1:] if (len(points) - 1) % every else [])
    out = []
    for c in keep:
        nat, tem = c.get("natural", {}), c.get("template", {})
        f = lambda d, k: f"{d[k]:.3f}" if k in d else "—"  # noqa: E731
        out.append(f"| {c['step']} | {c['tokens_seen']:,} | {c['data_sequences']:,} | {f(nat, 'step1_agree')} | "
                   f"{f(nat, 'step2_agree')} | {f(nat, 'step3_agree')} | {f(nat, 'step1_alpha')} | "
                   f"{f(tem, 'step1_agree')} | {f(tem, 'step1_alpha')} |")
    return out


def cmd_card(args: argparse.Namespace) -> None:
    """assets/feature_head/README.md from the exported head's info and docs/benchmarks.json."""
    meta = json.loads((args.out / "config.json").read_text())
    info = meta["info"]
    bench = benchmarks()
    lines = _card_head(meta, (args.out / "model.safetensors").stat().st_size / 1e6) + _card_curve_and_reproduce(info)
    if bench.get("quality"):
        lines += ["## Measured (`python -m bench.quality`, docs/benchmarks.md)", "",
                  *quality_table(bench["quality"]["rows"], by_proposer=True), ""]
    elif bench.get("proposers"):  # the older proposer section: it measured the previous head
        lines += _card_proposers(args, meta, bench["proposers"])
    (args.out / "README.md").write_text("\n".join(lines))
    log(f"wrote {args.out / 'README.md'}")


def _card_head(meta: dict, size_mb: float) -> list[str]:
    """The card's title and what the head is, how big, and what it was trained on."""
    info, layer = meta["info"], meta["layer_config"]
    rows = [r for p in sorted(DATA.glob("shard-*.pt")) for r in torch.load(p)["rows"]] if DATA.exists() else []
    generated = sum(len(r["ids"]) - r["num_prompt"] for r in rows)
    by_source: dict[str, int] = {}
    for r in rows:
        source = r.get("source", "template")
        by_source[source] = by_source.get(source, 0) + len(r["ids"]) - r["num_prompt"]
    return [
        "# specviz feature head for SmolLM2-135M-Instruct (EAGLE-style)",
        "",
        "A one-layer draft head that reads the target's own final hidden states (`specviz/feature_head.py`,",
        "`specviz/proposers/feature.py`). Input at entry p: the target's post-norm feature F[p] and the",
        "target's embedding of token p+1, fused by a linear map; one Llama decoder layer of the target's width",
        f"({layer['hidden_size']} wide, {layer['num_attention_heads']} query / "
        f"{layer['num_key_value_heads']} KV heads, "
        f"MLP {layer['intermediate_size']}) with its own one-layer KV cache; output: a predicted F[p+1] that",
        "the target's frozen output head turns into logits over a trimmed vocabulary of "
        f"{info.get('vocab_size')} tokens",
        "(the tokens with the most target probability mass on target-generated text; q = 0 elsewhere, the",
        "residual restores those tokens exactly).",
        "",
        f"- File: `model.safetensors`, float16, {size_mb:.1f} MB (the target's embedding and output head are",
        "  borrowed at load time, not stored); `config.json` holds the layer config, the vocabulary subset",
        "  is in the safetensors file, and a fingerprint of the target refuses any other model.",
        f"- Training: {info.get('steps')} steps, {info.get('train_minutes')} CPU-minutes on a shared 2-core CPU "
        f"(settings {info.get('train_args')}); data: {len(rows):,} target generations, {generated:,} generated",
        "  tokens (half greedy, half sampled at T=1), with the target's features, made in bfloat16 by",
        "  `scripts/feature_data.py` from the template prompts (`assets/prompts/train.jsonl`) and prompts that are",
        "  not template-built (`assets/prompts/diverse.jsonl`: paragraph tasks, hand-written standalone prompts,",
        "  prompts the target wrote itself, two-turn conversations); generated tokens per source: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(by_source.items())) + ".",
        "  2% of the prompts are held out for the template validation; the natural held-out set",
        "  (`assets/prompts/natural.jsonl`, hand-written, never trained on) is the second validation set.",
        "- Loss: soft cross-entropy toward the target's exact distribution on the subset + smooth-L1 on the",
        "  predicted feature; Gaussian feature noise; a training-time test (EAGLE-3) of "
        f"{info.get('train_args', {}).get('unroll', 3)} passes, each feeding",
        "  a random half of the inputs with the previous pass's own predictions.",
        "",
    ]


def _card_curve_and_reproduce(info: dict) -> list[str]:
    caps = shard_caps()
    return [
        "## Held-out curve (agreement = the head's argmax equals the target's, per draft depth)",
        "",
        "The natural set (96 answers to hand-written prompts) is fixed. The training-mix held-out rows are the",
        "first 48 in shard order, so that set changed as phases were added: from step 1335 it held rows of the",
        "answered-again phase, which is harder than the template mix (now left out of validation: `held_out`).",
        "Compare that column only between neighbouring rows.",
        "",
        "| step | training tokens seen | data sequences | natural d1 | natural d2 | natural d3 | natural α d1 "
        "| training-mix held-out d1 | its α d1 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *curve_rows(),
        "",
        "## Reproduce (the phase caps are the shards this head was trained on)",
        "",
        "```bash",
        f"python scripts/feature_data.py --workers 2 --worker 0 {caps} &  # generations",
        f"python scripts/feature_data.py --workers 2 --worker 1 {caps}     # + features",
        "python scripts/feature_data.py --natural                  # the natural set's answers: validation only",
        "python scripts/train_feature_head.py train " + train_flags(info.get("train_args", {})),
        "python scripts/train_feature_head.py export && python scripts/train_feature_head.py card",
        "python -m bench.quality --into docs   # natural vs template, chain vs tree -> docs/benchmarks.md",
        "```",
        "",
        "Data generation and training ran at the same time on the same 2 cores (training reads new shards as",
        "they appear), so a rerun lands close to, not exactly on, these numbers.",
        "",
    ]


def _card_proposers(args: argparse.Namespace, meta: dict, pr: dict) -> list[str]:
    """The Measured section from docs/benchmarks.json's proposers section (before bench.quality
    existed); it also records in config.json whether the head is the faster learned proposer."""
    from bench.report import _best_learned, _best_speed

    k, info = pr["quality_k"], meta["info"]
    info["preferred_over_draft"] = _best_learned(pr) == "feature"  # the faster one at T=0
    meta["info"] = info
    (args.out / "config.json").write_text(json.dumps(meta, indent=1))  # preferred_proposer() reads this
    speed = {p: (_best_speed(pr, (p,)) or {}).get("measured_speedup") or 0.0 for p in ("draft", "feature")}
    fmt = lambda x, f=".3f": "—" if x is None else format(x, f)  # noqa: E731
    lines = [f"The app and CLI open on the {'feature head' if info['preferred_over_draft'] else 'draft model'}, "
              f"the faster learned proposer at T=0: best {speed['feature']:.2f}x (head) vs "
              f"{speed['draft']:.2f}x (draft) the target's plain greedy `generate`.", ""]
    lines += [f"## Measured (held-out prompts, `docs/benchmarks.md`, K={k})", "",
              "| proposer | T=0 acceptance | T=0 tokens/cycle | T=1 α | c (draft step ÷ target step) |",
              "|---|---:|---:|---:|---:|"]
    for p in pr["proposers"]:
        g = pr["greedy"].get(f"{p}_K{k}_T0", {})
        a = pr["sampled"].get(p, {})
        c = ((pr["cost"].get(p) or {}).get("c") or {}).get("median")
        lines.append(f"| {p} | {fmt(g.get('acceptance_rate'))} | {fmt(g.get('tokens_per_cycle'), '.2f')} | "
                     f"{fmt(a.get('alpha'))} | {fmt(c)} |")
    best = max((r for r in pr["rows"] if r["measured_speedup"] is not None), key=lambda r: r["measured_speedup"],
               default=None)
    if best:
        lines += ["", f"Best speed at T=0: {best['proposer']} at K={best['K']}, "
                  f"{best['measured_speedup']:.2f}x the "
                  "target's plain greedy `generate` (median of per-prompt ratios)."]
    lines += ["", "Bounds of the issue and whether they are met: see the Goals table of docs/benchmarks.md.", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train")
    tr.add_argument("--minutes", type=float, default=40)
    tr.add_argument("--batch", type=int, default=16)
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--vocab", type=int, default=8192)
    tr.add_argument("--noise", type=float, default=0.05)
    tr.add_argument("--unroll", type=int, default=3,
                    help="training-time test: passes on the head's own predictions (1 = none)")
    tr.add_argument("--threads", type=int, default=2)
    tr.add_argument("--val-minutes", type=float, default=2.0, help="validate and save a checkpoint this often")
    tr.add_argument("--init-from", type=Path, default=None,
                    help="start from this saved head (e.g. assets/feature_head) when no checkpoint exists")
    tr.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=False,
                    help="bfloat16 autocast (slower than float32 on this CPU)")
    cv = sub.add_parser("coverage")
    cv.add_argument("--sizes", type=int, nargs="+", default=[8192, 12288, 16384])
    ex = sub.add_parser("export")
    ex.add_argument("--out", type=Path, default=EXPORT)
    cd = sub.add_parser("card")
    cd.add_argument("--out", type=Path, default=EXPORT)
    args = ap.parse_args()
    {"train": cmd_train, "export": cmd_export, "card": cmd_card, "coverage": cmd_coverage}[args.cmd](args)


if __name__ == "__main__":
    main()
