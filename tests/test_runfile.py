"""A recorded run as a file (specviz/runfile.py): round trip, the older list-of-traces export,
token texts complete enough to draw with no tokenizer, and a clear RunFileError for every kind
of bad file."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_replay_layouts import LAYOUTS, PROPOSERS, assert_same_bookkeeping, real_run, replay, tiny_pair

from specviz import DecodeConfig, traces_to_json
from specviz.cli import main as cli_main
from specviz.runfile import (
    FORMAT_NAME,
    MAX_RUN_BYTES,
    OLD_FORMAT_TITLE,
    RunFileError,
    RunRecord,
    load_run,
    record_run,
    run_token_ids,
)
from specviz.trace import CYCLE_PHASES, PhaseSnapshot
from specviz.viz.kv_html import kv_stage_html


def a_record(proposer: str = "draft", layout=LAYOUTS[0]) -> RunRecord:
    return real_run(proposer, 1.0, layout)[0]


# ---------------------------------------------------------------- round trip


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_to_json_and_back_is_the_same_run(proposer):
    record = a_record(proposer, ("paged", 4, "keep"))
    again = load_run(record.to_json())
    assert again == record
    assert again.notes == ()
    assert load_run(record.to_json().encode()) == record  # bytes, as an upload gives them
    assert isinstance(again.config, DecodeConfig) and again.config == record.config
    assert all(isinstance(k, int) for k in again.token_texts)
    assert again.format == FORMAT_NAME and again.version == "1.0"


def test_the_fields_of_a_record():
    record = dataclasses.replace(a_record(), baseline_ms_per_token=12.5)
    pair = tiny_pair()
    assert record.pair == "tiny-target + tiny-draft" and record.proposer == "draft"
    assert list(record.prompt_ids) == pair.tokenizer.encode(record.prompt_text)
    assert record.max_context == 512  # the tiny target's own limit, not the config's 2048
    assert record.cache_reach == len(record.prompt_ids) + 4 + 2 + 1  # prompt + max_new_tokens + K + 1 at start
    assert record.created.endswith("+00:00")
    assert load_run(record.to_json()).baseline_ms_per_token == 12.5


def test_config_with_forced_outcomes_round_trips():
    record = dataclasses.replace(a_record(), config=DecodeConfig(k=3, forced_outcomes=((1, True), (2, False))))
    assert load_run(record.to_json()).config.forced_outcomes == ((1, True), (2, False))


def test_unknown_settings_from_a_newer_version_are_ignored_with_a_note():
    data = a_record().to_dict()
    data["config"]["speculation_depth_tree"] = 3
    data["version"] = "1.7"  # a newer minor version only adds optional fields
    data["a_field_from_the_future"] = True
    loaded = load_run(json.dumps(data))
    assert loaded.config == a_record().config
    assert any("speculation_depth_tree" in note for note in loaded.notes)


def test_record_run_reads_the_sizing_from_the_prefill_when_the_config_changed_live():
    """A config passed after a live change of K would size the caches differently from the run:
    the prefill snapshot wins, so a replay still equals the real run."""
    record = a_record("draft", LAYOUTS[0])
    later = record.config.replace(k=5, max_new_tokens=40)
    again = record_run("t", "p", "draft", later, record.prompt_text, False, record.prompt_ids, record.prefill,
                       record.traces, record.token_text, max_context=record.max_context)
    assert again.cache_reach == record.cache_reach
    assert_same_bookkeeping(replay(again, ("paged", 4, "free")), real_run("draft", 1.0, ("paged", 4, "free"))[0])


# ---------------------------------------------------------------- token texts


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_every_token_of_the_run_has_its_text(proposer):
    record = a_record(proposer, ("paged", 1, "free"))
    texts = tiny_pair().tokenizer
    ids = run_token_ids(record.prompt_ids, record.prefill, record.traces)
    assert ids == set(record.token_texts)
    assert all(record.token_texts[i] == texts.decode([i]) for i in ids)
    assert record.token_text(10**6) == "<1000000>"  # the fallback exists, for ids outside the run


def test_a_token_tree_run_round_trips_with_every_text():
    """A tree run's file keeps the tree (nodes, path, moves) and the texts of every node and every
    token the proposer fed while growing the tree."""
    record = real_run("draft", 1.0, ("paged", 4, "free"), tree_width=3)[0]
    assert all(t.tree is not None for t in record.traces)
    again = load_run(record.to_json())
    assert again == record and again.config.tree_width == 3 and again.config.tree_nodes == 8
    fed = {tok for t in record.traces for tok in t.tree.proposer_fed}
    nodes = {n.token_id for t in record.traces for n in t.tree.nodes}
    assert fed | nodes <= set(record.token_texts)


def test_a_loaded_run_draws_with_no_tokenizer():
    """Every view of a loaded run draws from token_texts alone: a lookup that fails on any id the run
    did not record would raise, and the fallback is never taken."""
    record = load_run(a_record("feature", ("paged", 4, "keep")).to_json())

    def strict(token_id: int) -> str:
        return record.token_texts[token_id]  # KeyError for any id the file lacks

    prefill = PhaseSnapshot("prefill", *record.prefill)
    pictures = [kv_stage_html(prefill, None, strict, trace=None, phase="prefill", proposer=record.proposer)]
    pictures += [
        kv_stage_html(t.snapshot(phase), t.snapshot(CYCLE_PHASES[i - 1]) if i else None, strict, trace=t, phase=phase,
                      proposer=record.proposer)
        for t in record.traces
        for i, phase in enumerate(CYCLE_PHASES)
    ]
    assert len(pictures) == 1 + len(CYCLE_PHASES) * len(record.traces)
    ids = run_token_ids(record.prompt_ids, record.prefill, record.traces)
    assert all(record.token_text(i) != f"<{i}>" for i in ids)  # never the fallback


# ---------------------------------------------------------------- the older export


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_the_older_list_of_traces_loads(proposer):
    record = a_record(proposer, LAYOUTS[0])
    old = load_run(traces_to_json(list(record.traces)))
    assert old.title == OLD_FORMAT_TITLE and old.notes
    assert old.traces == record.traces
    assert old.prompt_ids == record.prompt_ids
    assert old.prefill == (record.traces[0].snapshot("start").target, record.traces[0].snapshot("start").draft)
    assert old.prefill == record.prefill
    assert old.proposer == proposer and old.config.proposer == proposer
    assert old.max_context == record.max_context and old.cache_reach == record.cache_reach
    assert all(record.token_texts[i] == text for i, text in old.token_texts.items())
    assert old.prompt_text.startswith("".join(old.token_text(t) for t in old.prompt_ids[:5]))
    # exact enough to replay: from a contiguous run the sizes are exact
    for layout in (("paged", 4, "keep"), ("paged", 16, "free")):
        assert_same_bookkeeping(replay(old, layout), real_run(proposer, 1.0, layout)[0])


def test_walk_json_output_loads(tmp_path):
    path = tmp_path / "walk.json"
    assert cli_main(["walk", "--tiny", "--cycles", "3", "--k", "3", "--json", str(path)]) == 0
    record = load_run(path.read_bytes())
    assert len(record.traces) == 3 and record.prompt_ids
    assert record.prompt_text
    assert load_run(record.to_json()) == record


# ---------------------------------------------------------------- bad files


def bad(data, *words):
    with pytest.raises(RunFileError) as caught:
        load_run(data)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return message


def test_not_json():
    bad("this is not json {", "not valid JSON", "line 1")
    bad("", "empty")
    bad(b"\xff\xfe\x00binary", "not text")
    bad("42", "not a specviz run")
    bad(json.dumps({"hello": "world"}), "not a specviz run", "no format name")
    bad(json.dumps({"format": "gguf"}), "'gguf'")


def test_newer_major_version():
    data = a_record().to_dict()
    data["version"] = "2.0"
    bad(json.dumps(data), "newer specviz", "update")
    data["version"] = "one"
    bad(json.dumps(data), "unreadable version")


def test_missing_fields():
    data = a_record().to_dict()
    del data["traces"], data["prompt_ids"]
    bad(json.dumps(data), "incomplete", "traces", "prompt_ids")


def test_a_cycle_that_cannot_be_rebuilt():
    data = a_record().to_dict()
    data["traces"][2] = {"cycle": 2}
    bad(json.dumps(data), "cycle 3", "cannot be read")
    data["traces"][2] = "cycle"
    bad(json.dumps(data), "cycle 3")
    old = [t.to_dict() for t in a_record().traces]
    old[0]["drafts"] = [{"index": 1}]
    bad(json.dumps(old), "cycle 1", "cannot be read")


def test_no_cycles():
    data = a_record().to_dict()
    data["traces"] = []
    bad(json.dumps(data), "no cycles")
    bad("[]", "no cycles")


def test_too_large():
    bad(b" " * (MAX_RUN_BYTES + 1), "at most 8 MB")


def test_bad_values():
    data = a_record().to_dict()
    data["config"]["k"] = 0
    bad(json.dumps(data), "settings are not valid", "K")
    data = a_record().to_dict()
    data["prompt_ids"] = ["a", "b"]
    bad(json.dumps(data), "prompt_ids")
    data = a_record().to_dict()
    data["prefill"] = [None, None]
    bad(json.dumps(data), "prefill")
    data = a_record().to_dict()
    data["token_texts"] = {"x": "a"}
    bad(json.dumps(data), "token_texts")
    with pytest.raises(RunFileError):
        load_run(12)  # neither text nor bytes


def test_an_old_export_without_snapshots():
    traces = [dataclasses.replace(t, snapshots=()) for t in a_record().traces]
    bad(traces_to_json(traces), "without cache snapshots", "prompt")
