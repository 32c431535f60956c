"""bench.auto_speed's measures of an answer: how much of it was copied from the prompt, and which
prompts count as copying when the bounds are judged."""

from __future__ import annotations

from bench.auto_speed import analyse, copy_share


def test_copy_share_counts_the_answer_tokens_inside_a_run_found_in_the_prompt():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    assert copy_share(prompt, [2, 3, 4, 5]) == 1.0  # one 4-token run of the prompt
    assert copy_share(prompt, [2, 3, 4, 5, 9, 9, 9, 9]) == 0.5
    assert copy_share(prompt, [2, 3, 4, 9, 5, 6, 7, 9]) == 0.0  # runs of 3 are not copies
    assert copy_share(prompt, [1, 2, 3, 4, 5, 6]) == 1.0  # overlapping runs cover every token once
    assert copy_share(prompt, []) == 0.0


def test_the_copying_answers_are_judged_by_the_plain_answer():
    def sample(prompt_id: str, system: str, seconds: float, share: float) -> dict:
        return {"set": "grounded", "T": 0.0, "id": prompt_id, "copies": True, "system": system, "seconds": seconds,
                "tokens": 10, "cycles": 5, "auto_k": None, "copy_share": share}

    samples = []
    for prompt_id, share, lookup_seconds in (("a", 0.9, 1.0), ("b", 0.1, 2.0), ("c", 0.6, 1.6)):
        samples += [sample(prompt_id, "plain_ar", 2.0, share), sample(prompt_id, "plain_hf", 2.0, share),
                    sample(prompt_id, "lookup_auto", lookup_seconds, 0.0)]
    row = next(r for r in analyse(samples)["rows"] if r["system"] == "lookup_auto")
    assert row["answer_copies"] == 1 and row["answer_median"] == 2.0  # only "a" copies (>= 80 %): 2x there
    assert row["partial_copies"] == 2 and row["partial_min"] == 1.25  # "c" copies 60 %: reported beside it
    assert row["median"] == 1.25 and row["copies_median"] == 1.25  # every prompt is marked `copies`
