"""bench/verify_cost.py on random tiny weights: the tree mask is the one the model applies, the
report has a row per N and dtype, and `--into` writes its own section (kept by a suite run)."""

from __future__ import annotations

import json

import pytest
import torch

from bench import separate, verify_cost
from specviz.kv import create_cache


@pytest.fixture(scope="module")
def tiny_target():
    model, _ = verify_cost.load_target("tiny", "float32", torch.device("cpu"))
    return model


def test_the_tree_mask_is_applied(tiny_target):
    tokens = verify_cost.past_tokens(tiny_target, 20, "tiny")
    cache = create_cache(tiny_target, "contiguous", max_len=40, initial_len=40)
    verify_cost.tree_forward(tiny_target, cache, tokens[:20], None)
    assert verify_cost.check(tiny_target, cache, tokens[20:], n=7) < 1e-4
    assert cache.get_seq_length() == 20  # every pass rolled back
    # Power: a node's logits under the tree differ from a pass that lets it see every earlier node.
    parents = verify_cost.heap_parents(7)
    tree = verify_cost.tree_forward(tiny_target, cache, tokens[20:27], parents)
    cache.truncate(20, "rollback")
    causal = verify_cost.tree_forward(tiny_target, cache, tokens[20:27], None)
    assert (tree[6] - causal[6]).abs().max() > 1e-2  # node 6 (depth 2) must not see nodes 1, 3, 4, 5


def test_heap_tree_depths_and_positions(tiny_target):
    assert verify_cost.heap_parents(7) == [-1, 0, 0, 1, 1, 2, 2]
    assert verify_cost.depths(verify_cost.heap_parents(7)) == [0, 1, 1, 2, 2, 2, 2]
    mask, positions = verify_cost.tree_inputs(verify_cost.heap_parents(3), 5, tiny_target)
    assert positions == [5, 6, 6] and mask.shape == (1, 1, 3, 8)
    assert (mask[0, 0, 2, :5] == 0).all() and mask[0, 0, 2, 6] < -1e30  # siblings do not see each other


def test_report_and_its_own_section(tmp_path, capsys):
    out = tmp_path / "docs"
    out.mkdir()
    (out / "benchmarks.md").write_text("# Benchmarks\n\nsuite text\n")
    args = ["--shape", "tiny", "--reps", "2", "--min-reps", "1", "--ns", "1,2,4", "--chain-ns", "4",
            "--threads", "1", "--note", "The machine was shared.", "--into", str(out)]
    assert verify_cost.main(args) == 0
    text = (out / "benchmarks.md").read_text()
    assert text.startswith("# Benchmarks\n\nsuite text") and text.count("<!-- verify_cost:begin -->") == 1
    assert "The machine was shared." in text and "**1 thread** (2 rounds)" in text
    result = json.loads((out / "benchmarks.json").read_text())["verify_cost"]
    rows = {(r["dtype"], r["n"]): r for r in result["rows"]}
    assert set(rows) == {(d, n) for d in ("float32", "bfloat16") for n in (1, 2, 4)}
    assert rows["float32", 1]["v"] == 1.0 and rows["bfloat16", 1]["v_same"] == 1.0
    assert rows["float32", 4]["causal_ms"] is not None and rows["float32", 2]["causal_ms"] is None
    assert "verify_cost" in separate.SEPARATE  # a suite run keeps the section
