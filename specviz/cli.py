"""Headless walk-through: run speculative decoding cycle by cycle and narrate each one.

    python -m specviz walk --prompt "Explain KV caches." --k 5 --cycles 8 [--tiny] [--json FILE]  # more: --help

Each cycle is printed with its positions and numbers (docs/design.md §1): the catch-up, each draft's
q, p, min(1, p/q), u and verdict (a token tree, §1c: as an outline, then its path and K/V moves), the
corrected or bonus token with the top of its distribution, and every cache event. `--json` writes
the CycleTraces.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from . import models, precision
from .config import AUTO, DecodeConfig
from .errors import SpecvizError
from .outcome import cycle_outcome
from .prompting import encode_prompt  # also imported from here by older callers (the same ids as the app)
from .proposers import registry
from .trace import CacheSnapshot, CycleTrace, DraftStep, TokenProb, TreeTrace

DEFAULT_PROMPT = "Explain in two sentences what a KV cache is."


def _show(text: str) -> str:
    return repr(text)[1:-1] if text else "''"


def _tops(tops: Sequence[TokenProb], n: int = 5) -> str:
    return ", ".join(f"'{_show(t.text)}' {t.prob:.3f}" for t in tops[:n])


def _layout_line(snap: CacheSnapshot) -> str:
    if snap.layout == "paged":
        free = f"{snap.num_free_blocks}/{snap.num_blocks} blocks free"
        return f"len {snap.seq_len}, block table {list(snap.block_table)}, {free}"
    return f"len {snap.seq_len}, write pointer at {snap.seq_len} of {snap.capacity}"


def format_cycle(trace: CycleTrace) -> str:
    """The walk-through of one cycle, as plain text."""
    n, k = trace.context_len, trace.k
    size = f"K = {k}" if trace.tree is None else f"a token tree of {k} nodes, depth K = {trace.tree.depth}"
    size += " (chosen by the cost law)" if trace.auto is not None else ""
    out = [f"=== cycle {trace.cycle + 1}: n = {n} committed tokens, {size}, temperature {trace.temperature:g}, "
           f"proposer {trace.proposer} ==="]
    catch = " ".join(f"'{_show(t.text)}'@{t.position}" for t in trace.catch_up)
    offset = registry.get(trace.proposer).cache_token_offset  # what its cache entry p holds (None: no cache)
    if offset == 1:
        fed = len(trace.catch_up)
        out.append(f"draft   catch-up: the head is fed {fed} pair(s) (target feature at p-1, token at p): {catch}")
    elif offset == 0:
        out.append(f"draft   catch-up: feeds {len(trace.catch_up)} token(s) it lacks: {catch}")
    if trace.auto is not None and trace.auto.k:  # a plain step's reason is the proposer note below
        out.append(f"auto    {trace.auto.reason}")
    if trace.proposer_note:
        out.append(f"draft   {trace.proposer_note}")
    if trace.tree is not None:
        out += _tree_lines(trace, trace.tree)  # the verify pass included
    else:
        out += [_draft_line(d) for d in trace.drafts]
        out.append(f"verify  target ran ONE pass over {k + 1} inputs (x_n and d1..d{k}) at positions "
                   f"{n - 1}..{n + k - 1} -> {k + 1} distributions p_1..p_{k + 1}" if k else
                   f"verify  no proposal: the target ran one plain step over x_n at position {n - 1} -> p_1")
    result = cycle_outcome(trace)  # the end of the text may have cut the drawn token: never assume it is there
    final = result.final
    token = f"'{_show(final.text)}' (id {final.token_id})" if final else "drawn, then cut off by the end of the text"
    if trace.tree is not None:
        if final is not None and final.kind in ("corrected", "bonus"):
            rule = "the leaf's p" if final.kind == "bonus" else (
                "p' at the last accepted node" if trace.tree.path else "p' at the root")
            out.append(f"resolve {final.kind} token {token} from {rule}")
    elif trace.rejected_at is not None:
        out.append(f"resolve rejection at d{trace.rejected_at}: corrected token {token} "
                   f"sampled from norm(max(0, p - q)) [top: {_tops(trace.residual_top)}]; no bonus token")
    elif k:
        out.append(f"resolve all {k} accepted: bonus token {token} sampled from p_{k + 1} "
                   f"[top: {_tops(trace.bonus_top)}]")
    emitted = " ".join(f"'{_show(t.text)}'({t.kind})" for t in trace.emitted)
    cut = f" (the end of the text cut {result.cut} of the {result.drawn} produced)" if result.cut else ""
    out.append(f"commit  +{len(trace.emitted)} token(s){cut}: {emitted}")
    for role, events in (("target", trace.target_events), ("draft", trace.draft_events)):
        out += [f"{role:7s} [{e.phase}] {e.describe()}" for e in events]
        snap = getattr(trace.snapshot("rollback"), role) if trace.snapshots else None
        if snap is not None:
            out.append(f"{role:7s} after rollback: {_layout_line(snap)}")
    if trace.invariant_max_abs_diff is not None:
        words = precision.invariant_words(trace.invariant_max_abs_diff, trace.dtype).replace("**", "")
        out.append(f"check   cache vs fresh prefill, max |diff|: {words}")
    out.append("time    ms: " + ", ".join(f"{p} {v:.1f}" for p, v in trace.timings_ms.items()))
    if trace.finish_reason:
        out.append(f"done    sequence finished: {trace.finish_reason}")
    return "\n".join(out)


def _draft_line(d: DraftStep) -> str:
    line = (f"draft   d{d.index} = '{_show(d.text)}' (id {d.token_id}, position {d.position}): "
            f"q = {d.draft_prob:.4f}, p = {d.target_prob:.4f}, min(1, p/q) = {d.ratio:.4f}")
    if d.verdict == "untested":
        return line + "  -> not tested (after the first rejection)"
    u = "greedy: accept iff d = argmax p" if d.u is None else f"u = {d.u:.4f}"
    return line + f", {u} -> {d.verdict.upper()}" + (" [FORCED: what-if mode]" if d.forced else "")


def _tree_lines(trace: CycleTrace, tree: TreeTrace) -> list[str]:
    """The tree as an indented outline (node, token, position, verify slot, q, p, test, verdict),
    then the verify pass, the accepted path and the compaction."""
    greedy = trace.temperature == 0
    L, N = tree.root_position, len(tree.nodes)
    depth = max((n.depth for n in tree.nodes), default=0)
    out = [f"tree    width {tree.width}, depth {depth} (K {tree.depth}), {N} nodes (budget {tree.budget}); "
           f"root x_n at position {L}, entry {L}"]

    def draw(parent: int, indent: str) -> None:
        children = [n for n in tree.nodes if n.parent == parent]
        for j, node in enumerate(children):
            last = j == len(children) - 1
            if node.verdict == "untested":
                test = "not asked"
            elif greedy:
                test = "= argmax" if node.verdict == "accepted" else "!= argmax"
            else:
                sign = "<" if node.verdict == "accepted" else ">="
                test = f"u {node.u:.4f} {sign} p' {node.accept_prob:.4f}"
            out.append(f"tree    {indent}{'└─' if last else '├─'} {node.index} '{_show(node.text)}' "
                       f"pos {node.position} slot {node.slot}: q {node.draft_prob:.4f}, p {node.target_prob:.4f}; "
                       f"{test} -> {node.verdict.upper()}")
            draw(node.index, indent + ("   " if last else "│  "))

    draw(0, "")
    out.append(f"verify  target ran ONE pass over {N + 1} inputs (x_n and {N} nodes) in entries {L}..{L + N}, at "
               f"positions {L}..{L + depth} (position = {L} + depth; siblings share one) under the tree mask")
    path = " -> ".join(str(a) for a in tree.path) or "none (no child of the root passed)"
    rule = "greedy walk" if greedy else "deterministic siblings, no q"
    out.append(f"accept  path: {path} ({rule})")
    moves = ", ".join(f"entry {a} -> {b}" for a, b in tree.moves)
    out.append(f"compact {'K/V moved: ' + moves + ' (no re-rotation)' if moves else 'nothing to move: path in place'}")
    return out


def _load_pair(args: argparse.Namespace, progress: Callable[[str, float | None], None]) -> Any:
    from . import tiny

    dtype = precision.dtype_name(args.dtype)  # a clear error before anything loads
    if args.tiny:
        return tiny.build_tiny_pair(seed=args.seed, dtype=dtype)
    if args.target or args.draft:
        if not (args.target and args.draft):
            raise SpecvizError("give both --target and --draft (or neither, for the default pair)")
        return models.load_pair(target=args.target, draft=args.draft, dtype=dtype, progress=progress,
                                feature_head=args.feature_head)
    return models.load_default_pair(dtype=dtype, progress=progress)


def walk(args: argparse.Namespace, out: TextIO) -> int:
    from .engine import SpeculativeDecoder

    def progress(message: str, fraction: float | None) -> None:
        pct = "" if fraction is None else f" {fraction:.0%}"
        print(f"[load]{pct} {message}", file=sys.stderr)

    pair = _load_pair(args, progress)
    cfg = DecodeConfig(
        proposer=args.proposer or models.preferred_proposer(pair), k=args.k, tree_width=args.tree_width,
        tree_nodes=args.tree_nodes, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        cache_layout=args.layout, page_size=args.page_size, free_policy=args.policy,
        max_new_tokens=args.max_new_tokens, check_invariant=args.check,
    )  # fmt: skip
    dec = SpeculativeDecoder(pair, cfg)
    ids = encode_prompt(pair.tokenizer, args.prompt, args.chat)  # the app's ids for the same prompt
    dec.start(ids)
    entry = registry.get(cfg.proposer)
    print(f"prompt: {len(ids)} tokens; target {pair.target_name}, proposer {cfg.proposer} "
          f"({pair.draft_name if entry.needs == 'draft' else entry.description}), {dec.dtype}", file=out)
    traces: list[CycleTrace] = []
    while len(traces) < args.cycles and not dec.finished:
        traces.append(dec.step())
        print(format_cycle(traces[-1]) + "\n", file=out)
    generated = dec.committed[dec.num_prompt_tokens :]
    text = pair.tokenizer.decode(generated) if pair.tokenizer is not None else str(generated)
    accepted = sum(t.num_accepted for t in traces)
    proposed = sum(t.k for t in traces)
    # A tree's nodes are alternatives, not a chain's drafts: its figure is tokens per verify pass.
    tally = (f"{accepted} path tokens from {proposed} tree nodes" if cfg.is_tree
             else f"{accepted}/{proposed} drafts accepted")
    print(f"generated {len(generated)} tokens in {len(traces)} cycles "
          f"({len(generated) / max(1, len(traces)):.2f} per cycle, one verify pass each; {tally}):", file=out)
    print(text, file=out)
    if args.json:
        Path(args.json).write_text(json.dumps([t.to_dict() for t in traces], indent=1))
        print(f"wrote {len(traces)} traces to {args.json}", file=out)
    return 0


def _draft_length(text: str) -> int | str:
    """--k: a whole number (checked by DecodeConfig, which says the range) or 'auto'."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or '{AUTO}', got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("walk", help="narrate speculative decoding cycle by cycle")
    w.add_argument("--prompt", default=DEFAULT_PROMPT)
    w.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap the prompt with the tokenizer's chat template, as the app's toggle does "
                        "(default: on; --no-chat feeds the raw text)")
    w.add_argument("--raw", dest="chat", action="store_false", help=argparse.SUPPRESS)  # the old spelling of --no-chat
    w.add_argument("--k", type=_draft_length, default=5,
                   help="draft length K (a token tree's depth), or 'auto': this machine's cost law picks K "
                        "(0 = a plain step) before each cycle, and the narration says why")
    w.add_argument("--tree-width", type=int, default=1,
                   help="children kept per tree node: 1 = a chain (default), above 1 = a token tree of depth K")
    w.add_argument("--tree-nodes", type=int, default=16, help="a token tree's node budget (with --tree-width > 1)")
    w.add_argument("--temperature", type=float, default=0.8)
    w.add_argument("--top-k", type=int, default=0)
    w.add_argument("--top-p", type=float, default=1.0)
    w.add_argument("--cycles", type=int, default=8)
    w.add_argument("--max-new-tokens", type=int, default=256)
    w.add_argument("--layout", choices=["paged", "contiguous"], default="paged")
    w.add_argument("--page-size", type=int, default=4)
    w.add_argument("--policy", choices=["free", "keep"], default="free")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--check", action="store_true", help="check both caches against a fresh prefill every cycle")
    w.add_argument("--json", help="write the traces to this JSON file")
    w.add_argument("--target", help="target model: hub id, local directory or .gguf file")
    w.add_argument("--draft", help="draft model: hub id, local directory or .gguf file")
    w.add_argument("--tiny", action="store_true", help="random tiny pair (smoke run, no model files)")
    w.add_argument("--proposer", choices=registry.names(),
                   help="who drafts (default: the pair's best): "
                        + "; ".join(f"{e.name} = {e.cli_help}" for e in registry.entries()))
    w.add_argument("--feature-head", help="a saved feature head directory for --target/--draft pairs")
    w.add_argument("--dtype", default=precision.DEFAULT_DTYPE,
                   help=f"the pair's precision: {' or '.join(precision.DTYPES)} (default {precision.DEFAULT_DTYPE}: "
                        "the exactness demo; bfloat16 where the CPU or GPU runs it faster). The invariant check's "
                        "tolerance follows it")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = build_parser().parse_args(argv)
    try:
        return walk(args, out)
    except SpecvizError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
