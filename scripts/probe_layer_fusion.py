"""A measured probe: does EAGLE-3's fusion of low- and mid-layer features help the feature head?

The shipped head (``assets/feature_head``) reads one target feature per position: the final
layer's output F[p], the very input of the target's output head. EAGLE-3 (Li et al. 2025) feeds
its head a fusion of a low, a middle and a high layer instead, on the argument that the last layer
is specialised to the *next* token while the head must guess the one after it. This probe asks
whether that holds for the 30-layer SmolLM2-135M target, before the engine is changed for it.

Two arms start from the same shipped head and train the same number of steps on the same rows:

* ``plain`` -- the head as it is (input ``[F ; e(x)]``);
* ``fused`` -- input ``[F ; e(x) ; low ; mid]``, where low and mid are the residual stream after
  target layers ``--low`` and ``--mid`` (RMS-normalised). The new input columns start at zero, so
  the fused arm starts as *exactly* the shipped head and can only learn to use the new features.
  In the training-time test (unrolled passes) an entry fed the head's own prediction gets zeros
  for low and mid: at decode time a drafted position has no target layers, only the head's guess.

The figure compared is the natural held-out set's per-depth agreement (``validate``, as in
``train_feature_head.py``), before and after.

    python scripts/probe_layer_fusion.py extract --shards 30     # low/mid for main shards 0..29 + natural
    python scripts/probe_layer_fusion.py train --arm plain --steps 200 &
    python scripts/probe_layer_fusion.py train --arm fused --steps 200
    python scripts/probe_layer_fusion.py report                  # the two curves side by side
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import train_feature_head as tfh  # noqa: E402
from feature_data import DATA, WORK, held_out  # noqa: E402
from training_common import load_target, log  # noqa: E402

from specviz.feature_head import FeatureHead  # noqa: E402

PROBE = WORK / "fusion"
SEED = 0


class FusedHead(FeatureHead):
    """The feature head with EAGLE-3's layer fusion: features are [..., 3H] = [F ; low ; mid]."""

    def widen(self) -> FusedHead:
        hidden = self.layer_config.hidden_size
        old = self.fuse.weight.detach()
        self.fuse = nn.Linear(4 * hidden, hidden, bias=False)
        with torch.no_grad():
            self.fuse.weight.zero_()
            self.fuse.weight[:, : 2 * hidden] = old  # [F ; e] as before; low and mid start unused
        return self

    def fused_input(self, features: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.layer_config.hidden_size
        embed = self._target[0](token_ids).to(features.dtype)
        return self.fuse(torch.cat([features[..., :hidden], embed, features[..., hidden:]], dim=-1))


# ---------------------------------------------------------------------------------------- extract


@torch.inference_mode()
def layer_features(target, rows: list[dict], layers: tuple[int, int], batch: int = 8) -> None:
    """Adds row["extra"] = [T, 2H] fp16: the RMS-normalised residual stream after each of `layers`,
    from one teacher-forced pass (bfloat16, stopped after the deeper layer)."""
    caught: dict[int, torch.Tensor] = {}

    class Enough(Exception):
        pass

    def hook(index):
        def grab(_module, _inputs, output):
            caught[index] = output[0] if isinstance(output, tuple) else output
            if index == max(layers):
                raise Enough
        return grab

    handles = [target.model.layers[i].register_forward_hook(hook(i)) for i in layers]
    try:
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]["ids"]))
        for start in range(0, len(order), batch):
            chunk = [rows[i] for i in order[start : start + batch]]
            width = max(len(r["ids"]) for r in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for j, r in enumerate(chunk):
                ids[j, : len(r["ids"])] = r["ids"].long()
                attn[j, : len(r["ids"])] = 1
            try:
                target.model(input_ids=ids, attention_mask=attn)
            except Enough:
                pass
            parts = [caught[i].float() for i in layers]
            parts = [p * torch.rsqrt(p.pow(2).mean(-1, keepdim=True) + 1e-6) for p in parts]
            both = torch.cat(parts, dim=-1).to(torch.float16)
            for j, r in enumerate(chunk):
                r["extra"] = both[j, : len(r["ids"])].clone()
            if start // batch % 25 == 0:
                log(f"  {start + len(chunk)}/{len(rows)} rows")
    finally:
        for h in handles:
            h.remove()


def cmd_extract(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    target, _tok = load_target(torch.device("cpu"), torch.bfloat16)
    PROBE.mkdir(parents=True, exist_ok=True)
    train = [r for b in range(args.shards) for r in torch.load(DATA / f"shard-main-{b:05d}.pt")["rows"]]
    train = [r for r in train if not held_out(r)]
    natural = tfh.natural_rows()[:96]
    t0 = time.time()
    for name, rows in (("natural", natural), ("train", train)):
        log(f"{name}: {len(rows)} rows, {sum(len(r['ids']) for r in rows):,} tokens")
        layer_features(target, rows, (args.low, args.mid))
        torch.save({"rows": rows, "layers": [args.low, args.mid]}, PROBE / f"{name}.pt")
    log(f"extracted in {time.time() - t0:.0f} s")


# ------------------------------------------------------------------------------------------ train


def batch_of(rows: list[dict], fused: bool):
    ids, feats, lse, attn, mask = tfh.make_batch(rows, torch.device("cpu"))
    if fused:
        extra = torch.zeros(*feats.shape[:2], rows[0]["extra"].shape[1])
        for i, r in enumerate(rows):
            extra[i, : len(r["ids"])] = r["extra"].float()
        feats = torch.cat([feats, extra], dim=-1)
    return ids, feats, lse, attn, mask


def cmd_train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    fused = args.arm == "fused"
    target, _tok = load_target(torch.device("cpu"))
    shipped = FeatureHead.load(ROOT / "assets" / "feature_head", target)
    head = tfh.init_head(target, shipped.vocab.tolist())
    head.load_state_dict(shipped.state_dict(), strict=False)
    if fused:
        head.__class__ = FusedHead  # the same module, read through the fused input
        head.widen()
    head.train().requires_grad_(True)  # binding froze it
    train = torch.load(PROBE / "train.pt")["rows"]
    natural = torch.load(PROBE / "natural.pt")["rows"]
    by_length = sorted(train, key=lambda r: len(r["ids"]))
    curve = PROBE / f"curve-{args.arm}.jsonl"
    curve.unlink(missing_ok=True)

    def record(step: int, seconds: float) -> None:
        val = tfh.validate(head, natural, torch.device("cpu"), limit=len(natural),
                           batch_of=lambda rows: batch_of(rows, fused))
        log(f"{args.arm} step {step}: natural " + " ".join(f"{k} {v:.3f}" for k, v in val.items() if "agree" in k))
        with open(curve, "a") as f:
            f.write(json.dumps({"arm": args.arm, "step": step, "seconds": round(seconds),
                                **{k: round(v, 4) for k, v in val.items()}}) + "\n")

    record(0, 0.0)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    rng = random.Random(SEED)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, step / 10) * max(0.05, 1 - step / args.steps)
        loss, _stats = tfh.losses(head, *batch_of(tfh.similar_lengths(by_length, args.batch, rng), fused),
                                  noise=0.05, unroll=3)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % args.val_every == 0 or step == args.steps:
            record(step, time.time() - t0)


def cmd_report(_args: argparse.Namespace) -> None:
    arms = {}
    for path in sorted(PROBE.glob("curve-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        arms[rows[0]["arm"]] = rows
    print("| arm | step | natural d1 | d2 | d3 | α d1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for arm, rows in arms.items():
        for r in rows:
            print(f"| {arm} | {r['step']} | {r['step1_agree']:.3f} | {r['step2_agree']:.3f} | "
                  f"{r['step3_agree']:.3f} | {r['step1_alpha']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("--shards", type=int, default=30)
    ex.add_argument("--low", type=int, default=2)
    ex.add_argument("--mid", type=int, default=15)
    ex.add_argument("--threads", type=int, default=1)
    tr = sub.add_parser("train")
    tr.add_argument("--arm", choices=("plain", "fused"), required=True)
    tr.add_argument("--steps", type=int, default=200)
    tr.add_argument("--batch", type=int, default=16)
    tr.add_argument("--lr", type=float, default=3e-4)
    tr.add_argument("--val-every", type=int, default=50)
    tr.add_argument("--threads", type=int, default=1)
    sub.add_parser("report")
    args = ap.parse_args()
    {"extract": cmd_extract, "train": cmd_train, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
