"""specviz.prompting.encode_prompt (shared by the app, the CLI and the scenario gallery) and the
CLI's --chat/--no-chat switch."""

from __future__ import annotations

import io

import pytest

from specviz import PromptError, build_tiny_pair
from specviz.cli import build_parser, main
from specviz.prompting import encode_prompt


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from specviz.models import default_target_dir

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield AutoTokenizer.from_pretrained(str(default_target_dir()), local_files_only=True)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_an_empty_prompt_is_a_prompt_error(text):
    with pytest.raises(PromptError, match="empty"):
        encode_prompt(build_tiny_pair().tokenizer, text, chat=False)


@pytest.mark.slow
def test_chat_wraps_the_text_as_a_user_turn(tokenizer):
    raw = encode_prompt(tokenizer, "Why is the sky blue?", chat=False)
    chat = encode_prompt(tokenizer, "Why is the sky blue?", chat=True)
    assert raw == tokenizer.encode("Why is the sky blue?")
    text = tokenizer.decode(chat)
    assert "<|im_start|>user\nWhy is the sky blue?<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    assert all(isinstance(i, int) for i in chat)


def test_a_tokenizer_without_a_chat_template_gets_the_raw_text():
    tok = build_tiny_pair().tokenizer
    assert not getattr(tok, "chat_template", None)
    assert encode_prompt(tok, "abc", chat=True) == encode_prompt(tok, "abc", chat=False) == list(tok.encode("abc"))


def test_cli_chat_switch():
    parse = build_parser().parse_args
    assert parse(["walk"]).chat is True  # as before: the chat template, like the app's default
    assert parse(["walk", "--no-chat"]).chat is False
    assert parse(["walk", "--raw"]).chat is False  # the old spelling still works
    assert parse(["walk", "--no-chat", "--chat"]).chat is True


def test_cli_refuses_an_empty_prompt(capsys):
    assert main(["walk", "--tiny", "--prompt", " ", "--cycles", "1"], out=io.StringIO()) == 2
    assert "empty" in capsys.readouterr().err
