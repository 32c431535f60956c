"""Training prompts that are not template-built: what the proposers must generalise from.

A learned proposer imitates the target on the prompts it was trained on. Trained only on
"What is {topic}?"-style prompts, it learns the answers to those templates, not the target: on
prompts a person types it accepts far less (docs/benchmarks.md, natural vs template set). So the
training mix adds, from hand-written material (`assets/prompts/material.json`):

* **paragraph tasks** -- a paragraph to summarise, rewrite, shorten, title, answer... (longer inputs);
* **standalone** prompts written by hand in every register (facts, advice, code, arithmetic...);
* **target-written** prompts -- the target itself is asked for "a how-to question about {subject}"
  in many forms; its answers are filtered into new prompts (`extract_written_prompt`);
* **two-turn conversations** -- a prompt, the target's own answer, and a natural follow-up.

The hand-written held-out set (`assets/prompts/natural.jsonl`) is never trained on: every
training prompt that is a near-duplicate of a natural prompt (`near_duplicate`) is dropped, and a
test checks the shipped files. Everything is seeded: the same command gives the same prompts.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

PROMPTS = Path(__file__).resolve().parent.parent / "assets" / "prompts"
SEED = 4321
NEAR_DUPLICATE_JACCARD = 0.6  # word-set overlap at or above which two prompts count as the same


def words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9']+", text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def user_texts(row: dict) -> list[str]:
    """Every user message of a prompt row (one, or each user turn of a conversation)."""
    if "messages" in row:
        return [m["content"] for m in row["messages"] if m["role"] == "user"]
    return [row["prompt"]]


def natural_word_sets() -> list[frozenset[str]]:
    return [words(t) for row in read_jsonl(PROMPTS / "natural.jsonl") for t in user_texts(row)]


def near_duplicate(text: str, held_out: list[frozenset[str]]) -> bool:
    """True when `text` shares >= NEAR_DUPLICATE_JACCARD of its word set with a held-out prompt."""
    w = words(text)
    return any(jaccard(w, h) >= NEAR_DUPLICATE_JACCARD for h in held_out)


def material() -> dict:
    with open(PROMPTS / "material.json") as f:
        return json.load(f)


def paragraph_prompts(n: int, rng: random.Random) -> list[str]:
    m = material()
    pairs = [(t, p) for t in m["paragraph_tasks"] for p in m["paragraphs"]]
    return [t.format(p=p) for t, p in rng.sample(pairs, min(n, len(pairs)))]


def asks(n: int, rng: random.Random) -> list[str]:
    """Requests that make the target write a user prompt of a given form about a subject."""
    m = material()
    pairs = [(f, s) for f in m["request_forms"] for s in m["subjects"]]
    return [f"Write {f.format(s=s)}. Reply with that message only, nothing else."
            for f, s in rng.sample(pairs, min(n, len(pairs)))]


_LEAD_INS = re.compile(r"^(sure|here|okay|ok|certainly|of course|message|question|request|prompt)\b[^:]*:\s*", re.I)


def extract_written_prompt(answer: str) -> str | None:
    """The prompt inside the target's answer to an `asks` request, or None if it wrote none.

    Keeps the first non-empty line, strips lead-ins ("Sure, here is a question:") and quotes,
    and accepts 4..40 words that end like a message (? . !)."""
    line = next((s.strip() for s in answer.splitlines() if s.strip()), "")
    line = _LEAD_INS.sub("", line).strip().strip('"“”\'*').strip()
    n_words = len(line.split())
    if not 4 <= n_words <= 40 or not line.endswith(("?", ".", "!")):
        return None
    if any(bad in line.lower() for bad in ("as an ai", "i'm sorry", "i cannot", "<|", "write a", "reply with")):
        return None
    return line


def dedupe(texts: list[str], held_out: list[frozenset[str]]) -> list[str]:
    """Drop exact repeats (case-insensitive) and near-duplicates of the held-out prompts."""
    seen: set[str] = set()
    out = []
    for t in texts:
        key = " ".join(sorted(words(t)))
        if key in seen or near_duplicate(t, held_out):
            continue
        seen.add(key)
        out.append(t)
    return out


def conversation(first: str, answer: str, followup: str) -> list[dict]:
    return [{"role": "user", "content": first}, {"role": "assistant", "content": answer.strip()},
            {"role": "user", "content": followup}]


def followups() -> list[str]:
    return material()["followups"]
