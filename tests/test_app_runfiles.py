"""Crafted run files opened in the app (AppTest, the sidebar's "Open a run file"): each one is refused
with a sentence that says where and what, no traceback reaches the page, and nothing changes: the
runs listed and the run shown are those before the upload (docs/design.md §3, "The trust boundary")."""

from __future__ import annotations

import json

import pytest
from hostile_runs import tiny_record, with_value
from test_app import assert_clean, open_app, shown, workspace

from specviz.runfile import MAX_RUN_BYTES


def _crafted() -> list[tuple[str, bytes, str]]:
    data = json.loads(tiny_record().to_json())
    text = json.dumps(data)

    def edit(path, value) -> bytes:
        return json.dumps(with_value(data, path, value)).encode()

    return [
        ("k.json", edit(("traces", 0, "k"), "five"), "traces[0].k: expected an integer, got 'five'"),
        ("finish.json", edit(("traces", 0, "finish_reason"), "halted"), "traces[0].finish_reason: expected one of"),
        ("index.json", edit(("traces", 0, "drafts", 0, "index"), "x'><img src=x onerror=alert(1)>"),
         "traces[0].drafts[0].index: expected an integer"),
        ("huge.json", edit(("traces", 0, "snapshots", 0, "target", "seq_len"), 10**9), "seq_len: at most"),
        ("cut.json", text[: len(text) // 2].encode(), "not valid JSON"),
        ("big.json", b" " * (50 * 2**20), f"a run file may be at most {MAX_RUN_BYTES // 2**20} MB"),
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["k.json", "finish.json", "index.json", "huge.json", "cut.json", "big.json"])
def test_a_crafted_run_file_is_refused_in_words_and_changes_nothing(name):
    crafted = {n: (data, words) for n, data, words in _crafted()}
    data, words = crafted[name]
    at = open_app()
    before = ([r.id for r in workspace(at).runs()], shown(at).id, shown(at).traces)
    at.file_uploader(key="run_file").set_value((name, data, "application/json")).run()
    assert_clean(at)  # no traceback on the page
    errors = [e.value for e in at.error]
    assert any(f"Could not open {name}" in e and words in e for e in errors), errors
    assert ([r.id for r in workspace(at).runs()], shown(at).id, shown(at).traces) == before
