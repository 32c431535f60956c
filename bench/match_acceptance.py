"""How far a proposer's drafts can be trusted: acceptance per depth, per match length for a keyed one.

`python -m bench.match_acceptance [--proposer lookup] [--natural 30] [--grounded 30] [--k 8] [--max-new 64]
[--section NAME] [--into docs]`

Prompt lookup proposes what followed an earlier occurrence of the context's last n tokens (n = 3,
2 or 1, longest first). A 1-token match ("the", a comma) is a guess; a 3-token one usually sits in
a stretch the model is copying. Each cycle of a greedy run at a fixed K is classed by the length of
its match (`Proposer.match`, `costlaw.match_class`; the merged feature+lookup's class 0 is a cycle
the feature head drafted; a proposer that is not keyed has one class, "all"), and per class the
benchmark reports how many cycles, the share whose first draft passed, the acceptance per depth
a_i = P(d_i accepted | d_i tested) and the drafts accepted per cycle. These are the figures behind
`specviz.costlaw.MATCH_PRIORS` and `DEPTH_PRIORS`: auto starts from them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.costlaw import DEPTH_PRIORS, MATCH_PRIORS, PRIORS, match_class

from . import separate
from .common import Log, cpu_name, encode, prompt_rows

NAME = "match_acceptance"


def run_prompt(pair: Any, ids: list[int], k: int, max_new: int, tally: dict[Any, dict[str, Any]],
               proposer: str = "lookup") -> None:
    """One greedy run; each cycle's tested and accepted drafts added to its match class."""
    dec = SpeculativeDecoder(pair, DecodeConfig(proposer=proposer, k=k, temperature=0, max_new_tokens=max_new,
                                                instrument=False))
    dec.start(ids)
    while not dec.finished:
        found = dec.proposer.match(dec.committed, k)  # None: not keyed, every cycle in one class
        found = "all" if found is None else match_class(proposer, found[0])
        trace = dec.step()
        if found is None or not trace.k:
            continue
        row = tally.setdefault(found, {"cycles": 0, "first": 0, "accepted": 0, "tested": [0] * k, "passed": [0] * k})
        tested = trace.num_accepted + (trace.rejected_at is not None)
        row["cycles"] += 1
        row["first"] += trace.num_accepted > 0
        row["accepted"] += trace.num_accepted
        for depth in range(tested):
            row["tested"][depth] += 1
            row["passed"][depth] += depth < trace.num_accepted


def measure(pair: Any, args: argparse.Namespace, log: Log) -> dict[str, dict[int, dict[str, Any]]]:
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for set_name, n in (("natural", args.natural), ("grounded", args.grounded)):
        tally = out.setdefault(set_name, {})
        for i, row in enumerate(prompt_rows(set_name, n)):
            run_prompt(pair, encode(pair.tokenizer, row.get("messages") or row["prompt"]), args.k, args.max_new, tally,
                       args.proposer)
            log(f"{set_name} prompt {i + 1}/{n}")
    return out


def markdown(result: dict[str, Any]) -> str:
    proposer = result.get("proposer", "lookup")
    title = ("Prompt lookup's acceptance by match length" if proposer == "lookup"
             else f"{proposer}'s acceptance per depth" + (" and match length" if proposer in MATCH_PRIORS else ""))
    lines = [f"### {title} ({result.get('section', NAME)})", "",
             f"`{result['command']}` on {result['cpu']}: greedy {proposer} runs at K = {result['k']}, "
             f"{result['max_new']} new tokens per prompt; each cycle classed by the length of the match its drafts "
             "were copied from (3 = three or more; 0 = the feature head drafted; all = a proposer that is not keyed). "
             "a_i = accepted ÷ tested at depth i. The priors auto starts from: "
             f"{MATCH_PRIORS.get(proposer) or DEPTH_PRIORS.get(proposer) or PRIORS.get(proposer)}.", "",
             "| set | match | cycles | first draft passed | a_1 | a_2 | a_3 | a_4..a_K | drafts accepted per cycle |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for set_name, tally in result["sets"].items():
        for cls in sorted(tally, key=lambda c: (not c.isdigit(), c.zfill(3))):
            r = tally[cls]
            a = [p / t if t else None for p, t in zip(r["passed"], r["tested"], strict=True)]
            rest = (sum(r["passed"][3:]) / sum(r["tested"][3:])) if sum(r["tested"][3:]) else None
            f = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
            lines.append(f"| {set_name} | {cls} | {r['cycles']} | {r['first'] / r['cycles']:.0%} | {f(a[0])} | "
                         f"{f(a[1])} | {f(a[2])} | {f(rest)} | {r['accepted'] / r['cycles']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.match_acceptance", description=__doc__.splitlines()[0])
    ap.add_argument("--natural", type=int, default=30)
    ap.add_argument("--grounded", type=int, default=30)
    ap.add_argument("--proposer", default="lookup", help="any proposer of the table (lookup, feature, feature+lookup…)")
    ap.add_argument("--section", default=NAME, help="the report's section (one per proposer measured)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--into", default=None, help="write the section into this folder's benchmarks.md (e.g. docs)")
    args = ap.parse_args(argv)
    import specviz

    log = Log()
    pair = specviz.load_default_pair(dtype="float32")
    sets = measure(pair, args, log)
    result = {"command": "python -m bench.match_acceptance " + " ".join(sys.argv[1:] if argv is None else argv),
              "cpu": cpu_name(), "k": args.k, "max_new": args.max_new, "proposer": args.proposer,
              "section": args.section,
              "sets": {s: {str(c): row for c, row in t.items()} for s, t in sets.items()}}
    print(markdown(result))
    if args.into:
        separate.write_section(Path(args.into), args.section, markdown(result), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
