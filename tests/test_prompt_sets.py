"""The prompt sets: the natural held-out set is hand-written, varied and never trained on.

Quality figures are reported on `assets/prompts/natural.jsonl` (docs/benchmarks.md): they mean
something only if no training prompt is a near-duplicate of one of them, which is checked here
for every training prompt file that ships (templates, hand-written material, and the diverse
prompts the data recipe wrote down, target-written ones included)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import diverse_prompts as dp  # noqa: E402

KINDS = {"fact", "why_how", "advice", "child", "story", "poem", "rewrite", "summarise", "code", "arithmetic",
         "list", "conversation"}


def natural() -> list[dict]:
    return dp.read_jsonl(dp.PROMPTS / "natural.jsonl")


def training_texts() -> list[str]:
    texts = [r["prompt"] for r in dp.read_jsonl(dp.PROMPTS / "train.jsonl")]
    m = dp.material()
    texts += m["standalone"] + m["paragraphs"] + m["followups"]
    diverse = dp.PROMPTS / "diverse.jsonl"
    if diverse.exists():
        texts += [t for r in dp.read_jsonl(diverse) for t in dp.user_texts(r)]
    return texts


def test_natural_set_is_large_and_covers_every_kind():
    rows = natural()
    assert len(rows) >= 120
    assert {r["kind"] for r in rows} == KINDS
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["prompt"].lower() for r in rows}) == len(rows)


GROUNDED_KINDS = {"rewrite", "correct", "summarise", "extract", "quote", "edit_code"}


def grounded() -> list[dict]:
    return dp.read_jsonl(dp.PROMPTS / "grounded.jsonl")


def test_grounded_set_covers_every_input_grounded_kind_and_marks_copying():
    """The input-grounded set (prompt lookup and retrieval's ground): each prompt carries its own
    input, and `copies` says whether a right answer reproduces that input (corrections, quotes,
    code edits, extractions) or not (summaries, free rewrites)."""
    rows = grounded()
    assert len(rows) >= 24
    assert {r["kind"] for r in rows} == GROUNDED_KINDS
    assert len({r["id"] for r in rows}) == len(rows) and all(r["id"].startswith("grounded-") for r in rows)
    assert len({r["prompt"].lower() for r in rows}) == len(rows)
    assert all(isinstance(r["copies"], bool) for r in rows)
    assert sum(r["copies"] for r in rows) >= 8 and not all(r["copies"] for r in rows)
    assert all(r["copies"] for r in rows if r["kind"] in {"correct", "quote", "edit_code"})
    assert not any(r["copies"] for r in rows if r["kind"] == "summarise")


def test_no_training_prompt_is_a_near_duplicate_of_a_grounded_prompt():
    held_out = [dp.words(r["prompt"]) for r in grounded()]
    assert [t for t in training_texts() if dp.near_duplicate(t, held_out)] == []


def test_conversations_end_with_the_prompt_as_a_user_turn():
    convs = [r for r in natural() if r["kind"] == "conversation"]
    assert len(convs) >= 10
    for r in convs:
        roles = [m["role"] for m in r["messages"]]
        assert roles[0] == "user" and roles[-1] == "user" and "assistant" in roles
        assert r["messages"][-1]["content"] == r["prompt"]


def test_no_training_prompt_is_a_near_duplicate_of_a_natural_prompt():
    held_out = dp.natural_word_sets()
    close = [t for t in training_texts() if dp.near_duplicate(t, held_out)]
    assert close == []


def test_the_near_duplicate_check_catches_a_reworded_copy():
    held_out = dp.natural_word_sets()
    first = natural()[0]["prompt"]
    assert dp.near_duplicate(first.upper() + "!!", held_out)
    assert not dp.near_duplicate("Describe the migration routes of arctic terns over the Atlantic.", held_out)


@pytest.mark.parametrize(("answer", "expected"), [
    ('Sure! Here is a question: "Why do cats purr when they are happy?"', "Why do cats purr when they are happy?"),
    ("How can I keep my basil plant alive indoors?\nHope this helps.", "How can I keep my basil plant alive indoors?"),
    ("Cats.", None),  # too short to be a prompt
    ("Write a question about dogs.", None),  # echoes the request
    ("I'm sorry, I cannot write that for you today.", None),
])
def test_extract_written_prompt(answer, expected):
    assert dp.extract_written_prompt(answer) == expected


def test_material_templates_take_one_placeholder_each():
    m = dp.material()
    assert all(t.count("{p}") == 1 for t in m["paragraph_tasks"])
    assert all(f.count("{s}") == 1 for f in m["request_forms"])


def test_built_prompts_are_seeded():
    import random

    assert dp.asks(20, random.Random(1)) == dp.asks(20, random.Random(1))
    assert dp.paragraph_prompts(20, random.Random(1)) == dp.paragraph_prompts(20, random.Random(1))


def test_benchmark_prompt_sets_spread_over_the_kinds():
    from bench.common import NATURAL

    rows = [json.loads(line) for line in NATURAL.read_text().splitlines() if line.strip()]

    class Tok:  # the ids are not what this test is about: count the rows picked
        chat_template = None

        @staticmethod
        def encode(text):
            return [len(text)]

    from bench.common import prompt_set

    picked = prompt_set(Tok(), "natural", 12)
    assert len(picked) == 12
    assert len(prompt_set(Tok(), "grounded", 100)) == len(grounded())
    kinds = {rows[i * len(rows) // 12]["kind"] for i in range(12)}
    assert len(kinds) >= 8
