"""Crafted run files, as an attacker would write them (test scaffolding for the trust boundary,
docs/design.md §3): a real tiny run with a script payload in every free-text field, and walks
over a run file's fields that put a crafted value into each one in turn.

A payload that ran would set `window.__pwned`; one drawn as text shows its characters. Numbers are
crafted two ways: in the *file*, as a string or a huge or fractional number (the schema must refuse
them), and in the *records*, as `EvilInt` / `EvilFloat`, numbers that format as a payload, to check
that the views escape what they interpolate even when the schema is bypassed (defence in depth).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from typing import Any

import specviz
from specviz import DecodeConfig
from specviz.engine import SpeculativeDecoder
from specviz.runfile import RunRecord, record_run

PAYLOADS = (
    '"><img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=1</script>",
    "'><svg onload=window.__pwned=1>",
)
MARK = "PWN"  # every payload's text carries a mark, so a test can find it drawn as text


def payload(i: int) -> str:
    return f"{MARK}{i}{PAYLOADS[i % len(PAYLOADS)]}"


@functools.cache
def tiny_record(tree_width: int = 1, cycles: int = 3) -> RunRecord:
    """A real run of the tiny pair (paged, page size 4, T = 1), recorded as the app records it."""
    pair = specviz.build_tiny_pair(seed=0)
    config = DecodeConfig(
        k=3,
        temperature=1.0,
        max_new_tokens=24,
        seed=1,
        cache_layout="paged",
        page_size=4,
        tree_width=tree_width,
        tree_nodes=8,
    )
    dec = SpeculativeDecoder(pair, config)
    ids = pair.tokenizer.encode("the cat sat on the mat. the cat")
    dec.start(ids)
    prefill = (dec.target_cache.snapshot(len(ids)), dec.proposer.snapshot(len(ids)))
    traces = [dec.step() for _ in range(cycles)]
    return record_run(
        "tiny",
        "tiny-target + tiny-draft",
        "draft",
        config,
        "the cat sat on the mat. the cat",
        False,
        ids,
        prefill,
        traces,
        dec.token_text,
        max_context=dec.max_context,
    )


# Free-text fields: any text is valid there, so a payload must load and be drawn as text.
TEXT_KEYS = ("text", "proposer_note", "reason")
TOP_TEXT = ("title", "created", "pair", "prompt_text")


def hostile_text(data: dict[str, Any]) -> dict[str, Any]:
    """A run file's dict with a payload in every free-text field: title, pair, prompt, each token's
    text (the table of texts and every text a cycle carries), notes, and a timing's name."""
    data = json.loads(json.dumps(data))
    count = iter(range(10**6))
    for key in TOP_TEXT:
        data[key] = payload(next(count))
    data["token_texts"] = {k: payload(next(count)) for k in data["token_texts"]}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in TEXT_KEYS and isinstance(value, str):
                    node[key] = payload(next(count))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data["traces"])
    for trace in data["traces"]:
        trace["timings_ms"][payload(next(count))] = 1.0
    return data


def leaf_paths(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, value) of every number and string in a run file's dict, taking the first item of each
    list and the first cycle only (the others repeat the same shapes)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaf_paths(value, (*path, key))
    elif isinstance(node, list):
        if node:
            yield from leaf_paths(node[0], (*path, 0))
    elif not isinstance(node, bool) and node is not None:
        yield path, node


def with_value(data: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def where(path: tuple) -> str:
    """A path as the schema's errors name it: traces[0].drafts[0].index."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


# ---- numbers that format as a payload (the records, schema bypassed) ----


class EvilInt(int):
    """An int in every computation, a payload when formatted into text."""

    def __str__(self) -> str:
        return PAYLOADS[0]

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return PAYLOADS[0]


class EvilFloat(float):
    def __str__(self) -> str:
        return PAYLOADS[1]

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return PAYLOADS[1]


def evil_numbers(record: Any) -> Any:
    """`record` (any trace record or a RunRecord) with every int and float field an EvilInt / EvilFloat."""
    if isinstance(record, bool) or record is None or isinstance(record, str):
        return record
    if isinstance(record, int):
        return EvilInt(record)
    if isinstance(record, float):
        return EvilFloat(record)
    if isinstance(record, tuple):
        return tuple(evil_numbers(x) for x in record)
    if isinstance(record, dict):
        return {k: evil_numbers(v) for k, v in record.items()}
    if dataclasses.is_dataclass(record) and not isinstance(record, DecodeConfig):
        changes = {
            f.name: evil_numbers(getattr(record, f.name))
            for f in dataclasses.fields(record)
            if f.name not in ("config", "token_texts")
        }
        return dataclasses.replace(record, **changes)
    return record
