"""From the text a person types to the token ids a decoder starts from.

An instruction-tuned model was trained on conversations, not on bare text: its chat template
wraps a message in role markers (for SmolLM2, `<|im_start|>user ... <|im_end|>` after a default
system turn) and ends with the opening of the assistant's turn, so the model's next token is the
first token of an answer. Without the template the same model simply continues the text.

The app, the CLI, the benchmarks and the training scripts encode prompts here, so one prompt and
one setting give the same ids everywhere: the scenario gallery (`specviz.scenarios`) depends on
that, since a scenario found by seed reproduces only if the ids are identical.
"""

from __future__ import annotations

from typing import Any

from .errors import PromptError


def encode_prompt(tokenizer: Any, text: str, chat: bool) -> list[int]:
    """Token ids of `text`: wrapped as a user message by the tokenizer's chat template when
    `chat` is True and the tokenizer has one, else the raw text as `tokenizer.encode` gives it.

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
