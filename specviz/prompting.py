"""From the text a person types to the token ids a decoder starts from.

An instruction-tuned model's chat template wraps a message in role markers (SmolLM2:
`<|im_start|>user ... <|im_end|>`) and opens the assistant's turn, so the next token begins an
answer; without it the model simply continues the text. The app, the CLI, the benchmarks and the
training scripts all encode here, so a prompt gives the same ids everywhere (scenarios depend on it).
"""

from __future__ import annotations

from typing import Any

from .errors import PromptError


def encode_prompt(tokenizer: Any, text: str, chat: bool = True) -> list[int]:
    """Token ids of `text`: wrapped as a user message by the tokenizer's chat template when
    `chat` is True (the default, as in the app and the CLI) and the tokenizer has one, else the raw
    text as `tokenizer.encode` gives it.

    Raises PromptError on an empty (or all-whitespace) prompt: a decoder needs a token to start from."""
    if not text.strip():
        raise PromptError("The prompt is empty: type something for the model to continue.")
    if chat and getattr(tokenizer, "chat_template", None):
        return chat_ids(tokenizer, [{"role": "user", "content": text}])
    return [int(i) for i in tokenizer.encode(text)]


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a conversation (role/content dicts ending with a user turn) through the
    tokenizer's chat template, ending with the opening of the assistant's turn."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # BatchEncoding / dict in newer transformers
        ids = ids["input_ids"]
    return [int(i) for i in ids]
