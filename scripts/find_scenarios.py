"""Search seeds and prompts on the default pair for the scenario gallery; write assets/scenarios.json.

    nice -n 10 .venv/bin/python scripts/find_scenarios.py [--seeds 300] [--out assets/scenarios.json]

Nothing is forced: for each wanted lesson this tries (prompt, seed) pairs with the app's own
decoder and settings and keeps the first whose cycle (as early as possible) shows the lesson by
itself. Candidates are run as forks of one prefilled decoder per prompt (a fork reseeded with
`fork(seed)` continues exactly as `start()` with that seed would), and every scenario kept is then
replayed from scratch with `specviz.scenarios.check_scenario` before it is written.

A kept scenario must also be robust to float noise: every acceptance test up to its cycle has
|u - min(1, p/q)| >= MARGIN (for a token tree's node: |u - p'(x)|), so a different thread count
(last-bit differences in a matmul) cannot flip a verdict.

Token-tree scenarios (docs/design.md §1c) search the same way with a tree shape: a non-first
sibling wins (the compaction moves K/V), the whole deepest path is accepted, and a paged tree whose
compaction copies across a block boundary and frees a block. `--only tree-moves tree-deepest
tree-block-move` searches just those (the others are kept from --out).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from specviz import SpeculativeDecoder, build_tiny_pair, load_default_pair  # noqa: E402
from specviz.models import preferred_proposer  # noqa: E402
from specviz.prompting import encode_prompt  # noqa: E402
from specviz.runtime import eos_ids_of  # noqa: E402
from specviz.scenarios import SCENARIOS_FILE, CycleFacts, Scenario, check_scenario, facts_of  # noqa: E402

MARGIN = 0.02
PATIENCE = 40  # seeds tried after a hit, looking for an earlier cycle (quicker to check and to show)

PARAGRAPH = (
    "The library opens at nine in the morning and closes at six in the evening. Visitors may borrow up to "
    "five books at a time, and each loan lasts three weeks. Quiet rooms on the second floor can be booked "
    "at the front desk. "
)
LONG_PROMPT = PARAGRAPH * 14 + "The library opens at"


@dataclass(frozen=True)
class Search:
    id: str
    title: str
    lesson: str
    prompts: tuple[str, ...]
    want: Callable[[CycleFacts], bool]
    chat: bool = True
    k: int = 5
    temperature: float = 1.0
    cache_layout: str = "paged"
    page_size: int = 16
    free_policy: str = "free"
    max_new_tokens: int = 128
    max_cycle: int = 2  # the lesson must happen by this 0-based cycle: the check stays quick
    tree_width: int = 1  # > 1: a token tree of depth k with this many children per node
    tree_nodes: int = 16
    proposer: str | None = None  # None: the pair's preferred proposer


SEARCHES = (
    Search(
        "all-accepted", "All K drafts accepted, plus a bonus token",
        "Every draft passes u <= min(1, p/q), so the one verify pass also yields a bonus token from p_K+1: "
        "K+1 tokens for a single target pass.",
        ("Count from one to ten in words.", "Write the days of the week in order.", "What is the capital of France?"),
        lambda f: f.rejected_at is None and f.bonus and f.finish_reason is None,
    ),
    Search(
        "reject-d1", "A rejection at d1",
        "The first draft fails its test: the cycle still commits one token, the corrected one drawn from "
        "norm(max(0, p1 - q1)), and the provisional K/V of every draft is rolled back.",
        ("Write a haiku about autumn leaves.", "Tell me a joke about skyscrapers."),
        lambda f: f.rejected_at == 1,
    ),
    Search(
        "frees-block", "A rejection that frees a block",
        "With 4-token pages and the 'free' policy, the rollback truncates the target cache across a block "
        "boundary: the blocks holding only rejected positions go back to the pool (a 'free' event).",
        ("Explain in two sentences why the sky is blue.", "Write a haiku about autumn leaves."),
        lambda f: f.rejected_at is not None and f.frees_block,
        k=6, page_size=4,
    ),
    Search(
        "eos-drafted", "The proposer drafts the end of the text",
        "An end-of-text token is drafted after an ordinary draft and accepted: the text ends at it, so "
        "whatever the cycle produced after it is cut, and the decoder stops.",
        ("Answer with one word: what colour is the sky on a clear day?", "Reply with only yes or no: is ice cold?",
         "Say hello."),
        lambda f: f.eos_at is not None and f.eos_at >= 2 and f.num_accepted >= f.eos_at and f.finish_reason == "eos",
        max_cycle=4,
    ),
    Search(
        "long-context", "A rejection far down a long context",
        "A prompt of about 700 tokens: the verify pass, the rejection and the rollback happen at "
        "positions near the end of a long cache, and the views window around them.",
        (LONG_PROMPT,),
        lambda f: f.rejected_at is not None and f.num_accepted >= 1,
        chat=False,
    ),
    Search(
        "tree-moves", "Token tree: a non-first sibling wins, so its K/V move",
        "The target agrees with a branch other than the proposer's favourite: the accepted nodes sit in verify "
        "entries L+a_i and the rollback copies their K/V to L+i (no re-rotation: they ran at those positions).",
        ("Explain in two sentences why the sky is blue.", "Write a haiku about autumn leaves.",
         "Tell me a joke about skyscrapers."),
        lambda f: f.tree_moves >= 1 and f.num_accepted >= 2,
        k=4, tree_width=3, tree_nodes=16,
    ),
    Search(
        "tree-deepest", "Token tree: the whole deepest path accepted",
        "One verify pass over the tree accepts a root-to-leaf path as deep as the tree, then draws the bonus "
        "token from the leaf's p: depth + 1 tokens for a single target pass.",
        ("Count from one to ten in words.", "Write the days of the week in order.", "What is the capital of France?"),
        lambda f: f.deepest_path and f.bonus and f.num_accepted >= 3 and f.finish_reason is None,
        k=3, temperature=0.7, tree_width=3, tree_nodes=16, max_cycle=4,
    ),
    Search(
        "tree-block-move", "Paged tree: the compaction crosses a block and frees one",
        "With 4-token pages the accepted nodes' K/V are copied from a later block into an earlier one, then the "
        "blocks holding only dropped entries go back to the pool.",
        ("Explain in two sentences why the sky is blue.", "Write a haiku about autumn leaves.",
         "Count from one to ten in words."),
        lambda f: f.move_crosses_block and f.frees_block,
        k=4, page_size=4, tree_width=3, tree_nodes=16,
    ),
    Search(
        "retrieval-run", "Retrieval: a long run copied from text the target wrote before",
        "No model drafts here: the last tokens of the context also occur in the target's own earlier answers, and "
        "what followed them there is proposed. The target accepts a long run of them in one verify pass -- exact "
        "whatever the guesses' source, since each is kept only as often as the target would produce it.",
        ("What is photosynthesis?", "Explain in two sentences why the sky is blue.", "What is the capital of France?",
         "Tell me about the culture of Egypt."),
        lambda f: f.num_accepted >= 4,
        k=5, max_cycle=6, proposer="retrieval",
    ),
)


def search(pair, spec: Search, proposer: str, seeds: int) -> Scenario | None:
    eos = sorted(eos_ids_of(pair.target))
    for prompt in spec.prompts:
        scenario = Scenario(spec.id, spec.title, spec.lesson, prompt, spec.chat, spec.k, spec.temperature, 0,
                            spec.cache_layout, spec.page_size, spec.free_policy, spec.max_new_tokens, proposer, 0,
                            expect=None, tree_width=spec.tree_width, tree_nodes=spec.tree_nodes)  # type: ignore[arg-type]
        root = SpeculativeDecoder(pair, scenario.config())
        root.start(encode_prompt(pair.tokenizer, prompt, spec.chat))
        print(f"[{spec.id}] prompt {prompt[:50]!r} ({len(root.committed)} tokens)", flush=True)
        began = time.time()
        best: Scenario | None = None
        best_seed = 0
        for seed in range(seeds):
            if best is not None and (best.cycle == 0 or seed - best_seed > PATIENCE):
                break
            hit = first_hit(root.fork(seed=seed), spec, eos, best.cycle if best else spec.max_cycle + 1)
            if hit is not None:
                cycle, facts = hit
                print(f"[{spec.id}] seed {seed}, cycle {cycle}: {facts} ({time.time() - began:.0f} s)", flush=True)
                best = Scenario(**{**scenario.to_dict(), "seed": seed, "cycle": cycle, "expect": facts})
                best_seed = seed
            if seed % 25 == 24:
                print(f"[{spec.id}]   ... {seed + 1} seeds tried ({time.time() - began:.0f} s)", flush=True)
        if best is not None:
            return best
    return None


def first_hit(dec: SpeculativeDecoder, spec: Search, eos: list[int], before: int) -> tuple[int, CycleFacts] | None:
    """The first cycle (< before) whose facts are what `spec` wants, if no near tie came first."""
    for cycle in range(before):
        if dec.finished:
            return None
        trace = dec.step()
        # A tree's drafts are its nodes, with ratio = the p'(x) an asked node was tested against.
        if any(d.u is not None and abs(d.u - d.ratio) < MARGIN for d in trace.drafts):
            return None  # a near tie: float noise could flip it elsewhere
        facts = facts_of(trace, eos)
        if spec.want(facts):
            return cycle, facts
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=300, help="seeds tried per prompt")
    parser.add_argument("--out", type=Path, default=SCENARIOS_FILE)
    parser.add_argument("--only", nargs="*", help="search only these scenario ids (others are kept from --out)")
    parser.add_argument("--pair", choices=["default", "tiny"], default="default",
                        help="tiny: the random tiny pair, to try the search itself quickly (never for the gallery)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the app on a small machine; the MARGIN covers other thread counts
    pair = load_default_pair() if args.pair == "default" else build_tiny_pair(seed=0)
    proposer = preferred_proposer(pair)
    kept = {}
    if args.only and args.out.is_file():
        kept = {e["id"]: e for e in json.loads(args.out.read_text())}
    for spec in SEARCHES:
        if args.only and spec.id not in args.only:
            continue
        found = search(pair, spec, spec.proposer or proposer, args.seeds)
        if found is None:
            print(f"[{spec.id}] NOT FOUND", flush=True)
            continue
        problems = check_scenario(pair, found)  # from scratch, exactly as the app and the test run it
        if problems:
            print(f"[{spec.id}] found by a fork but a fresh run differs: {problems}", flush=True)
            continue
        kept[spec.id] = found.to_dict()
    order = [s.id for s in SEARCHES]
    entries = sorted(kept.values(), key=lambda e: order.index(e["id"]) if e["id"] in order else len(order))
    args.out.write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(entries)} scenarios to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
