"""Tokens stand for bytes, not characters (docs/design.md §5, "Tokens are bytes").

A byte-level BPE cuts a character outside its merges across tokens: "🙂" (F0 9F 99 82) is two
SmolLM2 tokens, and `decode` of either half gives "�", which hides the lesson. This module labels
such a token with the bytes it stands for, `<0xF0><0x9F>`, honestly (`label_bytes` reads a label
back into its bytes), and tells which consecutive tokens together make which character.
No torch and no tokenizer here: the views read labels from traces.
"""

from __future__ import annotations

import codecs
import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# A lead byte and the continuation bytes its length needs: a multi-byte UTF-8 character, if it decodes.
_MULTIBYTE = re.compile(rb"[\xc0-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xff][\x80-\xbf]{3}")


@functools.cache
def byte_level_table() -> dict[str, int]:
    """GPT-2's `bytes_to_unicode` inverted: vocabulary character -> the byte it stands for. Printable
    Latin-1 bytes stand for themselves; the other 68 (controls, space, 0x7F-0xA0, 0xAD) move to U+0100
    onwards in byte order, so no vocabulary string holds a space or a control character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(moved)}


def byte_level_bytes(piece: str) -> bytes | None:
    """The bytes a byte-level BPE vocabulary string stands for (None if it is not one)."""
    table = byte_level_table()
    if not piece or any(c not in table for c in piece):
        return None
    return bytes(table[c] for c in piece)


def byte_fallback_bytes(piece: str) -> bytes | None:
    """The byte of a sentencepiece byte-fallback token "<0xNN>" (None for any other piece)."""
    match = BYTE_TOKEN.fullmatch(piece)
    return bytes([int(match.group(1), 16)]) if match else None


def bytes_label(raw: bytes) -> str:
    """Text where `raw` holds whole UTF-8 characters, `<0xNN>` for every byte that is not part of one."""
    return raw.decode("utf-8", errors="specviz-byte-labels")


def _byte_labels(err: UnicodeDecodeError) -> tuple[str, int]:
    return "".join(f"<0x{b:02X}>" for b in err.object[err.start : err.end]), err.end


codecs.register_error("specviz-byte-labels", _byte_labels)


def label_bytes(label: str) -> bytes:
    """The inverse of `bytes_label`: the bytes a label stands for."""
    parts = BYTE_TOKEN.split(label)  # text, hex digits of a byte, text, ..., text
    return b"".join(bytes([int(p, 16)]) if i % 2 else p.encode("utf-8") for i, p in enumerate(parts))


def is_whole(raw: bytes) -> bool:
    """True when `raw` is valid UTF-8 on its own: every character complete."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass(frozen=True)
class CharacterSpan:
    """Tokens `first..last` (indices into the sequence given, inclusive) whose bytes together make `text`."""

    first: int
    last: int
    text: str


def character_spans(pieces: Sequence[bytes | None]) -> list[CharacterSpan]:
    """Which consecutive tokens share a character, for a sequence of token bytes.

    Only characters cut across tokens are listed ("🙂" as tokens 5-6 gives CharacterSpan(5, 6, "🙂"));
    a token whose characters are all its own is in no span. Characters that share a token are
    merged into one span (a token holding the end of one character and the start of the next joins
    them). A None piece (bytes unknown) joins nothing."""
    spans: list[CharacterSpan] = []
    for known, group in itertools.groupby(enumerate(pieces), key=lambda item: item[1] is not None):
        if known:  # a run of consecutive tokens whose bytes are known
            run = list(group)
            spans += _spans_in_run([piece for _, piece in run], run[0][0])  # type: ignore[misc]
    return spans


def _spans_in_run(pieces: Sequence[bytes], offset: int) -> list[CharacterSpan]:
    data = b"".join(pieces)
    owner = [offset + t for t, piece in enumerate(pieces) for _ in piece]  # byte -> token index
    spans: list[CharacterSpan] = []
    for match in _MULTIBYTE.finditer(data):  # a byte that starts no whole character stays with its own token
        first, last = owner[match.start()], owner[match.end() - 1]
        if first == last or not is_whole(match.group()):
            continue
        char = match.group().decode("utf-8")
        if spans and first <= spans[-1].last:  # shares a token with the previous cut character
            prev = spans.pop()
            spans.append(CharacterSpan(prev.first, max(prev.last, last), prev.text + char))
        else:
            spans.append(CharacterSpan(first, last, char))
    return spans
