"""Token-tree scenarios (specviz.scenarios, scripts/find_scenarios.py), without the default pair:
entries written before trees still load as chains; a tree scenario's shape and facts round-trip;
`facts_of` reads the compaction's moves, a block-crossing move and a fully accepted deepest path
from the trace; and the finder's search, run on the tiny pair, finds each tree lesson by seed and
a fresh `check_scenario` replay confirms it (the gallery's entries are found on the default pair)."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import sys
from pathlib import Path

import pytest

import specviz
from specviz.scenarios import OPTIONAL_FACTS, OPTIONAL_FIELDS, check_scenario, facts_of, scenario_from_dict

FINDER = Path(__file__).resolve().parent.parent / "scripts" / "find_scenarios.py"


@functools.cache
def finder():
    spec = importlib.util.spec_from_file_location("find_scenarios", FINDER)
    module = importlib.util.module_from_spec(spec)
    sys.modules["find_scenarios"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@functools.cache
def pair():
    return specviz.build_tiny_pair(seed=0)


def found(spec_id: str):
    f = finder()
    spec = next(s for s in f.SEARCHES if s.id == spec_id)
    scenario = f.search(pair(), spec, "draft", seeds=30)
    assert scenario is not None, f"no seed shows {spec_id} on the tiny pair"
    return scenario


@pytest.mark.parametrize("spec_id", ["tree-moves", "tree-deepest", "tree-block-move"])
def test_the_finder_finds_each_tree_lesson_and_a_fresh_replay_confirms_it(spec_id):
    scenario = found(spec_id)
    assert scenario.tree_width > 1 and scenario.config().is_tree
    assert check_scenario(pair(), scenario) == []
    spec = next(s for s in finder().SEARCHES if s.id == spec_id)
    assert spec.want(scenario.expect)
    wrong = dataclasses.replace(scenario, expect=dataclasses.replace(scenario.expect,
                                                                     tree_moves=scenario.expect.tree_moves + 1))
    assert any("tree_moves expected" in p for p in check_scenario(pair(), wrong))


def test_facts_of_a_tree_cycle_come_from_its_trace():
    scenario = found("tree-block-move")
    traces = specviz.scenarios.run_scenario(pair(), scenario)
    tr = traces[scenario.cycle]
    facts = facts_of(tr, [])
    assert facts.tree_moves == len(tr.tree.moves) >= 1
    crossing = [e for e in tr.target_events if e.kind == "move" and e.blocks[0] != e.blocks[1]]
    assert facts.move_crosses_block == bool(crossing) is True
    assert facts.deepest_path == (len(tr.tree.path) == max(n.depth for n in tr.tree.nodes))


def test_entries_from_before_trees_load_as_chains_and_tree_entries_round_trip():
    scenario = found("tree-moves")
    data = json.loads(json.dumps(scenario.to_dict()))
    assert scenario_from_dict(data) == scenario
    old = {k: v for k, v in data.items() if k not in OPTIONAL_FIELDS}
    old["expect"] = {k: v for k, v in data["expect"].items() if k not in OPTIONAL_FACTS}
    chain = scenario_from_dict(old)
    assert chain.tree_width == 1 and not chain.config().is_tree and chain.expect.tree_moves == 0
