"""The scenario gallery (docs/design.md §3): seeds that make a lesson happen by itself at a known cycle.

`scripts/find_scenarios.py` writes them to `assets/scenarios.json`; this module reads that file, and
`check_scenario` replays one and lists every recorded fact of its cycle (`CycleFacts`) that no longer holds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import DecodeConfig
from .errors import SpecvizError
from .prompting import encode_prompt
from .trace import CycleTrace

SCENARIOS_FILE = Path(__file__).resolve().parent.parent / "assets" / "scenarios.json"


class ScenarioFileError(SpecvizError):
    """assets/scenarios.json (or the file given) is missing, not JSON, or has a malformed entry."""


@dataclass(frozen=True)
class CycleFacts:
    """What one cycle did, in the terms a lesson is about (all from its CycleTrace)."""

    context_len: int  # n: committed tokens when the cycle started (prompt + generated)
    k: int  # drafts proposed
    num_accepted: int
    rejected_at: int | None  # 1-based index of the first rejected draft; None: all accepted
    bonus: bool  # a bonus token was drawn from p_{K+1}
    frees_block: bool  # the target's rollback returned a block to the pool
    eos_at: int | None  # 1-based index of the first end-of-text draft; None: no draft was EOS
    finish_reason: str | None  # "eos" / "max_new_tokens" / "context_full" when the cycle ended the text
    # Token trees (0 / False for a chain): the compaction's K/V moves (a non-first sibling won), a
    # move whose source and destination lie in different blocks, the whole deepest path accepted.
    tree_moves: int = 0
    move_crosses_block: bool = False
    deepest_path: bool = False


def facts_of(trace: CycleTrace, eos_ids: Sequence[int]) -> CycleFacts:
    return CycleFacts(
        context_len=trace.context_len, k=trace.k, num_accepted=trace.num_accepted, rejected_at=trace.rejected_at,
        bonus=trace.bonus_token is not None,
        frees_block=any(e.kind == "free" and e.phase == "rollback" for e in trace.target_events),
        eos_at=next((d.index for d in trace.drafts if d.token_id in eos_ids), None), finish_reason=trace.finish_reason,
        tree_moves=len(trace.tree.moves) if trace.tree is not None else 0,
        move_crosses_block=any(e.kind == "move" and len(e.blocks) == 2 and e.blocks[0] != e.blocks[1]
                               for e in trace.target_events),
        deepest_path=trace.tree is not None and bool(trace.tree.path)
        and len(trace.tree.path) == max(n.depth for n in trace.tree.nodes),
    )


@dataclass(frozen=True)
class Scenario:
    """A prompt and the settings that matter, the cycle where the lesson happens, and its facts.
    Other DecodeConfig fields keep the app's defaults, so `config()` is what the sidebar would build."""

    id: str
    title: str
    lesson: str  # one line: what to look at
    prompt: str
    chat: bool  # wrap the prompt with the chat template (the app's toggle)
    k: int
    temperature: float
    seed: int
    cache_layout: str
    page_size: int
    free_policy: str
    max_new_tokens: int
    proposer: str
    cycle: int  # 0-based index of the cycle where it happens (the app numbers it cycle + 1)
    expect: CycleFacts
    tree_width: int = 1  # a token tree's width (1: a chain) and node budget; K is its depth
    tree_nodes: int = 16

    def config(self) -> DecodeConfig:
        names = {f.name for f in dataclasses.fields(DecodeConfig)}
        return DecodeConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in names})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


# Fields an entry may omit (written before token trees): a chain, and no tree facts.
OPTIONAL_FIELDS, OPTIONAL_FACTS = _defaults(Scenario), _defaults(CycleFacts)


def scenario_from_dict(data: Any) -> Scenario:
    """Build a Scenario from one JSON entry; ScenarioFileError names what is wrong."""
    if not isinstance(data, dict):
        raise ScenarioFileError(f"a scenario must be a JSON object, got {type(data).__name__}")
    name = data.get("id", "?")
    fields = {f.name for f in dataclasses.fields(Scenario)}
    missing, unknown = fields - data.keys() - OPTIONAL_FIELDS.keys(), data.keys() - fields
    if missing or unknown:
        raise ScenarioFileError(f"scenario {name!r}: missing {sorted(missing)}, unknown {sorted(unknown)}")
    expect = data["expect"]
    fact_names = {f.name for f in dataclasses.fields(CycleFacts)}
    if not isinstance(expect, dict) or not fact_names - OPTIONAL_FACTS.keys() <= expect.keys() <= fact_names:
        raise ScenarioFileError(f"scenario {name!r}: 'expect' must list exactly "
                                f"{sorted(fact_names - OPTIONAL_FACTS.keys())}, and may add the tree facts "
                                f"{sorted(OPTIONAL_FACTS)}")
    scenario = Scenario(**{**data, "expect": CycleFacts(**expect)})
    try:
        scenario.config().validate()
    except SpecvizError as err:  # a bad K or layout is the file's fault: say which scenario
        raise ScenarioFileError(f"scenario {name!r}: {err}") from err
    if not isinstance(scenario.cycle, int) or scenario.cycle < 0:
        raise ScenarioFileError(f"scenario {name!r}: cycle must be an integer >= 0, got {scenario.cycle!r}")
    return scenario


def load_scenarios(path: str | Path | None = None) -> list[Scenario]:
    """The scenarios of `path` (default: assets/scenarios.json), in the file's order."""
    path = Path(path) if path is not None else SCENARIOS_FILE
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioFileError(f"cannot read the scenario file {path}: {err}") from err
    except json.JSONDecodeError as err:
        raise ScenarioFileError(f"the scenario file {path} is not valid JSON: {err}") from err
    if not isinstance(entries, list):
        raise ScenarioFileError(f"the scenario file {path} must hold a JSON list of scenarios")
    scenarios = [scenario_from_dict(e) for e in entries]
    ids = [s.id for s in scenarios]
    if len(set(ids)) != len(ids):
        raise ScenarioFileError(f"the scenario file {path} repeats an id: {ids}")
    return scenarios


def run_scenario(pair: Any, scenario: Scenario) -> list[CycleTrace]:
    """The traces of cycles 0 .. scenario.cycle, from the decoder the app builds for it (fewer if
    the text ends first)."""
    from .engine import SpeculativeDecoder  # torch is needed only to run, not to read the file

    dec = SpeculativeDecoder(pair, scenario.config())
    dec.start(encode_prompt(pair.tokenizer, scenario.prompt, scenario.chat))
    traces = []
    while len(traces) <= scenario.cycle and not dec.finished:
        traces.append(dec.step())
    return traces


def check_scenario(pair: Any, scenario: Scenario) -> list[str]:
    """Replay the scenario on `pair`; return every expected fact that does not hold (empty: it holds)."""
    from .runtime import eos_ids_of

    traces = run_scenario(pair, scenario)
    if len(traces) <= scenario.cycle:
        return [f"{scenario.id}: the text ended after {len(traces)} cycle(s), before cycle {scenario.cycle}"]
    got = facts_of(traces[scenario.cycle], sorted(eos_ids_of(pair.target)))
    return [
        f"{scenario.id}: {name} expected {want!r}, got {getattr(got, name)!r}"
        for name, want in dataclasses.asdict(scenario.expect).items()
        if getattr(got, name) != want
    ]
