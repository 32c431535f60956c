"""Tokens are bytes: honest labels for pieces of a character (specviz.tokenbytes, runtime.TokenTexts),
the token strip's "bytes of 🙂" notes, and the folding of a long prompt in the strip."""

from __future__ import annotations

import random
import re

import pytest
from sample_traces import demo_token_text, demo_traces

from specviz.runtime import TokenTexts
from specviz.tokenbytes import (
    CharacterSpan,
    byte_level_bytes,
    byte_level_table,
    bytes_label,
    character_spans,
    label_bytes,
)
from specviz.viz import tokens

TEXTS = [
    "🙂", "你好", "naïve", "The quick brown fox jumps over the lazy dog.", "I 🙂 you 👍🏽! 你好, naïve café ♥\n\tend"
]


# ---------------------------------------------------------------- pure byte logic


def test_byte_level_table_is_gpt2s_bijection():
    table = byte_level_table()
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == 0x20 and table["Ċ"] == 0x0A and table["a"] == ord("a") and table["é"] == 0xE9
    assert byte_level_bytes("ĠâĻ") == b" \xe2\x99"
    assert byte_level_bytes("") is None and byte_level_bytes("a b") is None  # a real space is no vocab string


def test_bytes_label_writes_only_the_broken_bytes_and_reads_back():
    assert bytes_label("🙂".encode()[:2]) == "<0xF0><0x9F>"
    assert bytes_label(b" \xe2\x99") == " <0xE2><0x99>"
    assert bytes_label("naïve".encode()) == "naïve"
    assert bytes_label(b"\xa5x\xff") == "<0xA5>x<0xFF>"
    rng = random.Random(0)
    for _ in range(2000):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
        assert label_bytes(bytes_label(raw)) == raw


def test_character_spans_join_only_cut_characters():
    smile = "🙂".encode()
    assert character_spans([b"I ", smile[:2], smile[2:], b"!"]) == [CharacterSpan(1, 2, "🙂")]
    assert character_spans([smile[:1], smile[1:3], smile[3:]]) == [CharacterSpan(0, 2, "🙂")]
    assert character_spans([b"na", "ïve".encode()]) == []  # whole characters: nothing to join
    # A token holding the end of one character and the start of the next joins both.
    data = "你好".encode()
    assert character_spans([data[:2], data[2:4], data[4:]]) == [CharacterSpan(0, 2, "你好")]
    # Unknown bytes join nothing; nor does a stray continuation byte.
    assert character_spans([smile[:2], None, smile[2:]]) == []
    assert character_spans([b"\x99", b"x"]) == []


# ---------------------------------------------------------------- the default pair's tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from specviz.models import default_target_dir

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield AutoTokenizer.from_pretrained(str(default_target_dir()), local_files_only=True)


@pytest.mark.slow
def test_emoji_pieces_show_their_bytes(tokenizer):
    texts = TokenTexts(tokenizer)
    ids = tokenizer.encode("🙂")
    assert [tokenizer.decode([i]) for i in ids] == ["�", "��"]  # what every view showed before
    assert [texts(i) for i in ids] == ["<0xF0><0x9F>", "<0x99><0x82>"]
    assert texts.characters(ids) == [CharacterSpan(0, 1, "🙂")]


@pytest.mark.slow
def test_cjk_characters_each_take_two_tokens(tokenizer):
    texts = TokenTexts(tokenizer)
    ids = tokenizer.encode("你好")
    assert [texts(i) for i in ids] == ["<0xE4><0xBD>", "<0xA0>", "<0xE5><0xA5>", "<0xBD>"]
    assert texts.characters(ids) == [CharacterSpan(0, 1, "你"), CharacterSpan(2, 3, "好")]


@pytest.mark.slow
@pytest.mark.parametrize("text", ["naïve", "The quick brown fox jumps over the lazy dog.", " café\n\tend"])
def test_ordinary_tokens_keep_decode_text(tokenizer, text):
    texts = TokenTexts(tokenizer)
    ids = tokenizer.encode(text)
    assert [texts(i) for i in ids] == [tokenizer.decode([i]) for i in ids]
    assert texts.characters(ids) == []


@pytest.mark.slow
@pytest.mark.parametrize("text", TEXTS)
def test_labels_concatenate_back_to_the_text(tokenizer, text):
    texts = TokenTexts(tokenizer)
    ids = tokenizer.encode(text)
    assert b"".join(label_bytes(texts(i)) for i in ids).decode("utf-8") == text
    assert b"".join(texts.token_bytes(i) for i in ids).decode("utf-8") == text


@pytest.mark.slow
def test_every_vocabulary_label_reads_back_as_its_bytes(tokenizer):
    """No token's ordinary text is mistaken for a byte label, and only broken tokens are relabelled."""
    texts = TokenTexts(tokenizer)
    relabelled = 0
    for i in range(len(tokenizer)):
        label = texts(i)
        assert label_bytes(label) == texts.token_bytes(i), (i, label)
        if label != tokenizer.decode([i]):
            relabelled += 1
            assert "�" in tokenizer.decode([i]) and re.search(r"<0x[0-9A-F]{2}>", label), (i, label)
    assert 100 < relabelled < 1000  # the byte pieces of a 49k byte-level vocabulary (313 today)


# ---------------------------------------------------------------- other tokenizer kinds


class _FakeTokenizer:
    """A tokenizer with a given vocabulary and no byte-level decoder (sentencepiece-like)."""

    def __init__(self, pieces: list[str], decoded: list[str]) -> None:
        self.pieces, self.decoded = pieces, decoded

    def convert_ids_to_tokens(self, i: int) -> str:
        return self.pieces[i]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.decoded[i] for i in ids)


def test_sentencepiece_byte_fallback_tokens_show_their_byte():
    smile = "🙂".encode()
    pieces = ["▁hi", *(f"<0x{b:02X}>" for b in smile)]
    texts = TokenTexts(_FakeTokenizer(pieces, [" hi", "�", "�", "�", "�"]))
    assert [texts(i) for i in range(5)] == [" hi", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    assert texts.characters([0, 1, 2, 3, 4]) == [CharacterSpan(1, 4, "🙂")]


def test_a_tokenizer_of_neither_kind_keeps_decode():
    texts = TokenTexts(_FakeTokenizer(["a", "weird"], ["a", "�"]))
    assert texts(1) == "�" and texts.token_bytes(1) is None
    assert texts.characters([0, 1]) == []
    assert TokenTexts(None)(7) == "<7>"


# ---------------------------------------------------------------- the token strip


def _byte_text(labels: dict[int, str]):
    return lambda t: labels.get(t, "x")


def test_strip_marks_the_pieces_of_a_character():
    labels = {1: "I", 2: " <0xF0><0x9F>", 3: "<0x99><0x82>", 4: "!"}
    chips = tokens.strip_chips([1, 2, 3, 4], [], _byte_text(labels), None, "start")
    assert [c.character for c in chips] == ["", "🙂", "🙂", ""]
    assert [c.character_end for c in chips] == [False, False, True, False]
    assert "bytes of 🙂 (tokens 1–2)" in chips[1].tooltip and "bytes of 🙂" not in chips[0].tooltip
    html = tokens.strip_html(chips)
    assert "&lt;0xF0&gt;&lt;0x9F&gt;" in html and html.count("=🙂") == 1 and "bytes of 🙂 (tokens 1–2)" in html


def test_rejected_drafts_join_no_character():
    """After resolve, a rejected draft is drawn after the corrected token at the same position: its
    bytes are not part of the sequence, so they must not complete the corrected token's character."""
    prompt, traces = demo_traces(accepted_counts=(0,), k=3, prompt_len=4)
    chips = tokens.strip_chips(prompt, traces, demo_token_text, 0, "resolve")
    corrected = next(i for i, c in enumerate(chips) if c.kind == "corrected")
    chips[corrected] = tokens.Chip(0, "<0xF0><0x9F>", chips[corrected].position, "corrected", "")
    chips[corrected + 1] = tokens.Chip(0, "<0x99><0x82>", chips[corrected + 1].position, "rejected", "")
    assert chips[corrected + 1].position == chips[corrected].position
    assert all(not c.character for c in tokens.mark_characters(chips))


def _long_prompt_html(n: int) -> tuple[list[tokens.Chip], str]:
    chips = tokens.strip_chips(list(range(n)), [], lambda t: f"w{t}", None, "start")
    return chips, tokens.strip_html(chips)


def test_a_long_prompt_is_folded_into_details():
    chips, html = _long_prompt_html(1268)  # about a 5,000-character prompt
    assert "⋯ 1,204 more prompt tokens" in html
    assert html.count("<details") == 1 and "<script" not in html
    before, inside_and_after = html.split("<details", 1)
    inside, after = inside_and_after.split("</details>", 1)
    assert before.count("<span title=") == 16 and after.count("<span title=") == 48
    assert inside.count("<span title=") == 1204  # folded, not dropped: a click shows them
    assert ">w15<" in before and ">w16<" in inside and ">w1219<" in inside and ">w1220<" in after


def test_a_short_prompt_is_not_folded():
    _, html = _long_prompt_html(16 + 48 + tokens.FOLD_SLACK)
    assert "<details" not in html and html.count("<span title=") == 16 + 48 + tokens.FOLD_SLACK


def test_chips_can_wrap():
    chips, html = _long_prompt_html(1268)
    assert "white-space:pre;" not in html and "white-space:pre'" not in html
    assert html.count("<wbr>") >= len(chips)  # a break opportunity after every chip


def test_generated_tokens_follow_a_folded_prompt():
    prompt, traces = demo_traces(accepted_counts=(2,), k=3, prompt_len=200)
    html = tokens.strip_html(tokens.strip_chips(prompt, traces, demo_token_text, 0, "rollback"))
    after = html.split("</details>", 1)[1]
    assert "⋯ 136 more prompt tokens" in html
    assert "accepted token" in after and "corrected token" in after
