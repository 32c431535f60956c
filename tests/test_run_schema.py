"""The run file's schema (specviz/run_schema.py): what comes from outside is validated before anything
is built from it, and a file that fails says where and what.

Crafted files as an attacker or a careless hand would write them: a string, a bool or a fraction in
every numeric field (walked field by field over a real run's file), unknown words where a value set
belongs, a snapshot claiming a billion positions, non-finite or out-of-range probabilities,
truncated JSON, a 50 MB file. Old run files (tests/golden/*.run.json) still load.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hostile_runs import leaf_paths, tiny_record, where, with_value

from specviz import trace as records
from specviz.run_schema import (
    MAX_POSITIONS,
    SHOWN_CHARS,
    CacheEventModel,
    CacheSnapshotModel,
    ContextMatchModel,
    CycleTraceModel,
    DraftStepModel,
    EmittedTokenModel,
    PhaseSnapshotModel,
    TokenProbModel,
    TreeNodeModel,
    TreeTraceModel,
)
from specviz.runfile import MAX_RUN_BYTES, RunFileError, load_run, traces_from_json

GOLDEN = Path(__file__).resolve().parent / "golden"
ATTACK = "x'><img src=x onerror=alert(document.cookie)>" * 3


def refused(data, *words: str) -> str:
    """load_run refuses `data` (a dict is dumped to JSON) with a RunFileError holding every word."""
    text = data if isinstance(data, (str, bytes)) else json.dumps(data)
    with pytest.raises(RunFileError) as caught:
        load_run(text)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return message


def a_file(tree_width: int = 1) -> dict:
    return json.loads(tiny_record(tree_width).to_json())  # lists, as a file holds them


@pytest.mark.parametrize(
    ("model", "record"),
    [
        (CacheEventModel, records.CacheEvent), (CacheSnapshotModel, records.CacheSnapshot),
        (TokenProbModel, records.TokenProb), (DraftStepModel, records.DraftStep),
        (ContextMatchModel, records.ContextMatch), (EmittedTokenModel, records.EmittedToken),
        (TreeNodeModel, records.TreeNode), (TreeTraceModel, records.TreeTrace),
        (PhaseSnapshotModel, records.PhaseSnapshot), (CycleTraceModel, records.CycleTrace),
    ],
)  # fmt: skip
def test_the_schema_checks_every_field_of_the_records(model, record):
    """A field the records gain and the schema lacks would be dropped on loading: none is."""
    assert {f.name for f in dataclasses.fields(record)} <= set(model.model_fields)


@pytest.mark.parametrize("name", ["draft-chain.run.json", "feature-tree.run.json", "feature-tree.replayed.json"])
def test_old_run_files_still_load(name):
    record = load_run((GOLDEN / name).read_bytes())
    assert record.traces and record.prompt_ids


@pytest.mark.parametrize("tree_width", [1, 3])
def test_a_file_round_trips_through_the_schema_unchanged(tree_width):
    record = tiny_record(tree_width)
    assert load_run(record.to_json()) == record


def test_a_string_where_an_integer_belongs_says_where_and_what():
    data = with_value(a_file(), ("traces", 0, "drafts", 0, "index"), ATTACK)
    message = refused(data, "cycle 1 of the file cannot be read", "traces[0].drafts[0].index: expected an integer")
    assert ATTACK not in message and repr(ATTACK)[: SHOWN_CHARS - 1] + "…" in message  # echoed, cut short
    refused(with_value(a_file(), ("traces", 0, "k"), "five"), "traces[0].k: expected an integer, got 'five'")
    refused(with_value(a_file(), ("traces", 0, "drafts", 0, "position"), "7"), "traces[0].drafts[0].position")


def test_every_numeric_field_refuses_a_string_a_bool_and_a_fraction():
    """Walked over every number of a real run's file (the first item of each list, the first cycle):
    each crafted value is refused with the field named."""
    data = a_file(tree_width=3)
    numbers = [(path, v) for path, v in leaf_paths(data) if isinstance(v, (int, float))]
    reached = {key for path, _ in numbers for key in path if isinstance(key, str)}
    assert {"config", "prefill", "snapshots", "drafts", "draft_top", "nodes", "target_events"} <= reached
    for path, value in numbers:
        refused(with_value(data, path, ATTACK), where(path))
        refused(with_value(data, path, True), where(path))
        if isinstance(value, int) and path[-1] not in ("temperature", "top_p", "draft_confidence"):
            refused(with_value(data, path, 1.5), where(path))


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("traces", 0, "finish_reason"), "halted", "expected one of 'eos', 'max_new_tokens' or 'context_full'"),
        (("traces", 0, "drafts", 0, "verdict"), "maybe", "traces[0].drafts[0].verdict: expected one of"),
        (("traces", 0, "emitted", 0, "kind"), "<b>", "traces[0].emitted[0].kind"),
        (("traces", 0, "target_events", 0, "kind"), "explode", "traces[0].target_events[0].kind"),
        (("traces", 0, "target_events", 0, "phase"), "later", "traces[0].target_events[0].phase"),
        (("traces", 0, "snapshots", 0, "target", "layout"), "ring", "snapshots[0].target.layout"),
        (("traces", 0, "dtype"), "float8", "traces[0].dtype"),
        (("traces", 0, "proposer"), "oracle", "unknown proposer 'oracle'"),
        (("proposer",), "oracle", "unknown proposer 'oracle'"),
        (("config", "cache_layout"), "ring", "config.cache_layout"),
    ],
)
def test_words_outside_their_value_set_are_refused(path, value, words):
    refused(with_value(a_file(), path, value), words)


def test_probabilities_are_finite_and_in_zero_one():
    for value, words in ((1.5, "at most 1"), (-0.1, "at least 0"), ("NaN", "expected a number")):
        refused(with_value(a_file(), ("traces", 0, "drafts", 0, "draft_prob"), value), "draft_prob", words)
    text = json.dumps(with_value(a_file(), ("traces", 0, "drafts", 0, "u"), float("nan")))  # JSON's NaN
    refused(text, "traces[0].drafts[0].u: expected a finite number")
    text = json.dumps(with_value(a_file(), ("traces", 0, "timings_ms", "draft"), float("inf")))
    refused(text, "traces[0].timings_ms.draft: expected a finite number")


def test_sizes_are_bounded_by_the_run_and_by_a_hard_cap():
    """Positions and lengths within the prompt + generated tokens + one cycle's drafts; storage sizes
    under MAX_POSITIONS; the replay's up-front allocation within what the settings reach."""
    data = a_file()
    snap = ("traces", 0, "snapshots", 0, "target")
    refused(with_value(data, (*snap, "seq_len"), 10**9), f"{where(snap)}.seq_len", "at most")
    refused(with_value(data, (*snap, "seq_len"), 5_000), f"{where(snap)}.seq_len: 5000 is past the")
    refused(with_value(data, (*snap, "seq_len"), 1e9), "expected an integer")
    refused(with_value(data, (*snap, "slot_positions", 0), 5_000), f"{where(snap)}.slot_positions: 5000 is past")
    refused(with_value(data, (*snap, "capacity"), MAX_POSITIONS + 1), f"{where(snap)}.capacity")
    seq_len = data["prefill"][0]["seq_len"]
    refused(with_value(data, ("prefill", 0, "num_committed"), seq_len + 1), "prefill[0]", "more than seq_len")
    refused(with_value(data, ("max_context",), 10**9), "max_context")
    refused(with_value(data, ("config", "max_new_tokens"), 10**9), "config.max_new_tokens")
    refused(with_value(data, ("cache_reach",), 100_000), "cache_reach: 100000 is more than its settings reach")
    refused(with_value(data, ("traces", 0, "rejected_at"), 9), "rejected_at")
    assert data["traces"][0]["target_events"][0]["kind"] == "append"  # its positions are walked by the narrative
    refused(with_value(data, ("traces", 0, "target_events", 0, "end"), 100_000), "traces[0].target_events[0]: 100000")


def test_a_billion_position_snapshot_in_a_small_file_is_refused():
    """The finding: a 20-kilobyte file whose snapshot claims seq_len 1e9 grew the server to 22 GB."""
    record = tiny_record(cycles=3)
    data = with_value(record.to_dict(), ("traces", 0, "snapshots", 0, "target", "seq_len"), 10**9)
    data["traces"] = data["traces"][:1]
    text = json.dumps(data)
    assert len(text) < 40_000
    refused(text, "seq_len")


def test_a_wrong_shape_anywhere_is_a_sentence_not_a_traceback():
    for path, value in ((("prompt_ids",), 5), (("traces",), {"0": {}}), (("traces", 0), "cycle"),
                        (("prefill",), [None]), (("token_texts",), ["a"]), (("config",), 3)):  # fmt: skip
        refused(with_value(a_file(), path, value), where(path))


def test_truncated_json_and_a_50_mb_file_say_so():
    text = tiny_record().to_json()
    refused(text[: len(text) // 2], "not valid JSON", "line 1")
    big = b'{"format": "specviz-run", "traces": [' + b" " * (50 * 2**20) + b"]}"
    refused(big, "50.0 MB", f"at most {MAX_RUN_BYTES // 2**20} MB")
    refused(big.decode(), "50.0 MB")  # text as well as bytes, before it is encoded
    refused(b"[" * 100_000 + b"]" * 100_000, "not valid JSON", "recursion limit")  # json.loads: RecursionError
    refused(text[:-1] + ', "x": ' + "9" * 100_000 + "}", "not valid JSON", "number out of range")


def test_the_list_of_cycles_export_is_validated_too():
    items = [t.to_dict() for t in tiny_record().traces]
    assert traces_from_json(json.dumps(items)) == list(tiny_record().traces)
    items[0]["drafts"][0]["verdict"] = "<script>"
    with pytest.raises(RunFileError, match=r"cycle 1 of the file cannot be read: drafts\[0\]\.verdict"):
        traces_from_json(json.dumps(items))
    refused(json.dumps(items), "drafts[0].verdict")
