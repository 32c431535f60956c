"""A recorded run as one file: everything the views need, and no model (docs/design.md §4, §5).

A `RunRecord` holds the prompt, the prefill snapshots, one `CycleTrace` per cycle, how the run was
made (pair, proposer, the config it was started with, context limit, how far the caches were sized
to reach, for `specviz.replay`) and the text of every token id in it, so no view needs a tokenizer.

    record = record_run("Why is the sky blue?", "SmolLM2-135M + draft", "draft", dec.config,
                        prompt_text, chat, prompt_ids, prefill, traces, dec.token_text,
                        max_context=dec.max_context)
    text = record.to_json()          # one JSON object, format "specviz-run", version "1.0"
    record = load_run(text)          # also the older export (a bare list of traces), with `notes`
    record.token_text(42)            # drawn without any tokenizer

`prefill` is `(dec.target_cache.snapshot(n), dec.proposer.snapshot(n))` right after `start()`.
Anything wrong with a file raises `RunFileError` with a sentence, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pydantic_core

from .config import DecodeConfig
from .costlaw import CostLaw
from .errors import RunFileError, SpecvizError
from .run_schema import MAX_POSITIONS, validate_cycles, validate_run
from .trace import CYCLE_PHASES, CacheSnapshot, CycleTrace, record_from_dict

FORMAT_NAME = "specviz-run"
FORMAT_VERSION = "1.0"  # major.minor: a newer minor only adds optional fields; a newer major is refused
# The largest run file read (an upload too): 8 MB holds ~500 cycles of the default pair at K = 5 with every
# snapshot; a larger file is refused before it is parsed (parsing and validating cost ~1 s per 10 MB).
MAX_RUN_BYTES = 8 * 1024 * 1024
OLD_FORMAT_TITLE = "Imported cycles (older export)"

_REQUIRED = ("format", "version", "config", "prompt_ids", "prefill", "traces", "token_texts")


@dataclass(frozen=True)
class RunRecord:
    """One recorded speculative-decoding run, complete enough to draw and to replay without a model."""

    title: str
    created: str  # ISO 8601, UTC
    pair: str  # the pair in words: target and proposer names
    proposer: str  # "draft", "feature" or "lookup"
    config: DecodeConfig  # the config the run was started with
    max_context: int  # the most positions a sequence could hold (config, capped by the models)
    cache_reach: int  # positions each cache was sized for at start (it grows past that on demand)
    prompt_text: str
    chat: bool  # the prompt went through the chat template
    prompt_ids: tuple[int, ...]
    prefill: tuple[CacheSnapshot, CacheSnapshot | None]  # (target, proposer) right after start()
    traces: tuple[CycleTrace, ...]
    token_texts: dict[int, str]  # every token id of the run -> its text
    baseline_ms_per_token: float | None = None  # a plain autoregressive run's cost, when measured
    cost_law: CostLaw | None = None  # the recording machine's cost law (specviz.costlaw), for a replay elsewhere
    polls: tuple[dict[str, Any], ...] = ()  # a live lecture's questions and the class's counts (`room.Poll.result`)
    format: str = FORMAT_NAME
    version: str = FORMAT_VERSION
    # What loading had to guess or ignore (older export, settings from a newer specviz): shown,
    # never saved.
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def dtype(self) -> str:
        """The precision the run's pair ran in, as its cycles recorded it (float32 for older files)."""
        return self.traces[0].dtype if self.traces else "float32"

    def token_text(self, token_id: int) -> str:
        """The token's text; ``<id>`` only for an id outside the run (never for a recorded run)."""
        text = self.token_texts.get(token_id)
        return f"<{token_id}>" if text is None else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "version": self.version, "title": self.title, "created": self.created,
            "pair": self.pair, "dtype": self.dtype,  # for a reader of the file; loading takes it from the cycles
            "proposer": self.proposer, "config": dataclasses.asdict(self.config), "max_context": self.max_context,
            "cache_reach": self.cache_reach, "prompt_text": self.prompt_text, "chat": self.chat,
            "prompt_ids": list(self.prompt_ids),
            "prefill": [None if s is None else dataclasses.asdict(s) for s in self.prefill],
            "traces": [t.to_dict() for t in self.traces], "baseline_ms_per_token": self.baseline_ms_per_token,
            "cost_law": None if self.cost_law is None else self.cost_law.to_dict(), "polls": list(self.polls),
            # JSON keys are strings; load_run turns them back into ints
            "token_texts": {str(k): v for k, v in sorted(self.token_texts.items())},
        }  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


# ---------------------------------------------------------------- recording


def record_run(title: str, pair_description: str, proposer: str, config: DecodeConfig, prompt_text: str, chat: bool,
               prompt_ids: Sequence[int], prefill: tuple[CacheSnapshot, CacheSnapshot | None],
               traces: Iterable[CycleTrace], token_text: Callable[[int], str],
               baseline_ms_per_token: float | None = None, *, max_context: int | None = None,
               cost_law: CostLaw | None = None, polls: Sequence[dict[str, Any]] = ()) -> RunRecord:
    """A `RunRecord` of a run, with the text of every token id in it looked up once, now.

    `max_context` is the decoder's (the config's, capped by the models); without it, the prefill
    snapshot's where that says it exactly (contiguous layout), else the config's."""
    traces = tuple(traces)
    prompt_ids = tuple(int(t) for t in prompt_ids)
    if max_context is None:
        max_context = _max_context_of(prefill[0], config)
    reach = _cache_reach(config, len(prompt_ids), max_context, prefill[0])
    ids = run_token_ids(prompt_ids, prefill, traces)
    return RunRecord(
        title=title, created=datetime.now(UTC).isoformat(timespec="seconds"), pair=pair_description,
        proposer=proposer, config=config, max_context=max_context, cache_reach=reach, prompt_text=prompt_text,
        chat=bool(chat), prompt_ids=prompt_ids, prefill=tuple(prefill), traces=traces,
        token_texts={i: token_text(i) for i in sorted(ids)}, baseline_ms_per_token=baseline_ms_per_token,
        cost_law=cost_law, polls=tuple(polls),
    )


def _texts_in(trace: CycleTrace) -> Iterator[tuple[int, str]]:
    """(token id, text) of every token a trace names with its text: catch-up, drafts, top-N lists, emitted."""
    tops = [tp for step in trace.drafts for tp in (*step.draft_top, *step.target_top)]
    for tok in (*trace.catch_up, *trace.emitted, *trace.drafts, *tops, *trace.residual_top, *trace.bonus_top):
        yield tok.token_id, tok.text


def run_token_ids(prompt_ids: Iterable[int], prefill: Iterable[CacheSnapshot | None],
                  traces: Iterable[CycleTrace]) -> set[int]:
    """Every token id a view of this run may draw (slots never written, -1, are not tokens)."""
    ids = set(prompt_ids)
    snapshots = [s for s in prefill if s is not None]
    for t in traces:
        ids.update(token_id for token_id, _ in _texts_in(t))
        if t.tree is not None:  # a tree's nodes are its drafts; what the proposer fed while growing it too
            ids.update(t.tree.proposer_fed)
        snapshots.extend(s for snap in t.snapshots for s in (snap.target, snap.draft) if s is not None)
    ids.update(token for snap in snapshots for token in snap.slot_tokens)
    return {i for i in ids if i >= 0}


def _max_context_of(target: CacheSnapshot, config: DecodeConfig) -> int:
    """The context limit as far as a snapshot tells it: a contiguous buffer's hard limit is the
    context itself; a paged pool's cap is rounded to pages (or is an explicit num_blocks)."""
    if target.layout == "contiguous" and target.max_capacity > 0:
        return target.max_capacity
    return config.max_context


def _cache_reach(config: DecodeConfig, prompt_len: int, max_context: int, target: CacheSnapshot) -> int:
    """Positions the caches were sized for at start: the config's reach -- unless the prefill
    snapshot shows storage of another size (a config changed live before recording), in which
    case the snapshot's own size (to whole pages, for the paged layout)."""
    from .runtime import expected_reach

    reach = expected_reach(config, prompt_len, max_context)
    if target.capacity <= 0:
        return reach
    if target.layout == "paged":
        cap = target.max_capacity // target.page_size if target.max_capacity else target.num_blocks
        sized = min(cap, math.ceil(reach / target.page_size)) * target.page_size
    else:
        sized = max(1, reach)
    return reach if sized == target.capacity else target.capacity


# ---------------------------------------------------------------- loading


def load_run(data: str | bytes | bytearray) -> RunRecord:
    """A `RunRecord` from a run file (or the older list-of-traces export); `RunFileError` otherwise.
    Every field passes `run_schema` (types, value sets, sizes bounded by the run's own tokens) before
    any record is built: a file that fails changes nothing and says where and what."""
    obj = _parse(data)
    if isinstance(obj, list):
        return _from_old_export(obj)
    if not isinstance(obj, dict):
        raise RunFileError("this file holds JSON, but not a specviz run (expected an object or a list of cycles)")
    _check_format(obj)
    if missing := [k for k in _REQUIRED if k not in obj]:
        raise RunFileError(f"this run file is incomplete: it lacks {', '.join(missing)}")
    if isinstance(obj["traces"], list) and not obj["traces"]:
        raise RunFileError("this run file holds no cycles: there is nothing to show")
    valid = validate_run(obj)
    notes: list[str] = []
    config = _config_from_dict(valid["config"], notes)
    traces = _traces_from(valid["traces"])
    prompt_ids = tuple(valid["prompt_ids"])
    target, proposer = valid["prefill"]
    prefill = (record_from_dict(CacheSnapshot, target), None if proposer is None else
               record_from_dict(CacheSnapshot, proposer))
    max_context = valid.get("max_context", _max_context_of(prefill[0], config))
    reach = valid.get("cache_reach", _cache_reach(config, len(prompt_ids), max_context, prefill[0]))
    _check_reach(reach, config, len(prompt_ids), prefill[0])
    baseline = valid.get("baseline_ms_per_token")
    return RunRecord(
        title=valid.get("title", ""), created=valid.get("created", ""), pair=valid.get("pair", ""),
        proposer=valid.get("proposer") or traces[0].proposer, config=config, max_context=max_context,
        cache_reach=reach, prompt_text=valid.get("prompt_text", ""), chat=valid.get("chat", False),
        prompt_ids=prompt_ids, prefill=prefill, traces=traces,
        token_texts={int(k): v for k, v in valid["token_texts"].items()},
        baseline_ms_per_token=None if baseline is None else float(baseline), version=str(obj["version"]),
        cost_law=None if valid.get("cost_law") is None else CostLaw.from_dict(valid["cost_law"]),
        polls=tuple({k: list(v) if isinstance(v, tuple) else v for k, v in p.items()} for p in valid.get("polls", ())),
        notes=tuple(notes),
    )


def _check_reach(reach: int, config: DecodeConfig, prompt_len: int, target: CacheSnapshot) -> None:
    """The replay allocates `cache_reach` positions up front: no more than the run's settings could
    have reached (`runtime.expected_reach`) or its prefill snapshot shows allocated."""
    from .runtime import expected_reach

    most = max(expected_reach(config, prompt_len), target.capacity)
    if reach > most:
        raise RunFileError(f"this run file cannot be read: cache_reach: {reach} is more than its settings reach "
                           f"({most} positions: prompt + max_new_tokens + K + 1, or the prefill's capacity)")


def traces_from_json(text: str | bytes) -> list[CycleTrace]:
    """Cycle records from `trace.traces_to_json`'s text, validated as a run file's cycles are."""
    items = _parse(text)
    if not isinstance(items, list):
        raise RunFileError("this JSON is not a list of cycles")
    return list(_traces_from(validate_cycles(items, _first_context(items))))


def _parse(data: str | bytes | bytearray) -> Any:
    if not isinstance(data, (str, bytes, bytearray)):
        raise RunFileError(f"a run file is text or bytes, not {type(data).__name__}")
    if len(data) > MAX_RUN_BYTES:  # refused before it is parsed (a character is at least one byte)
        raise RunFileError(f"this file is {len(data) / 2**20:.1f} MB; a run file may be at most "
                           f"{MAX_RUN_BYTES // 2**20} MB")
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_RUN_BYTES:
        raise RunFileError(f"this file is {len(raw) / 2**20:.1f} MB; a run file may be at most "
                           f"{MAX_RUN_BYTES // 2**20} MB")
    if not raw.strip():
        raise RunFileError("this file is empty; a run file is the JSON that 'export run' writes")
    # pydantic-core's parser: half json.loads' time (another session waits it out: the GIL is held), and
    # a nesting too deep or a number too long is a ValueError here (json.loads: RecursionError).
    try:
        return pydantic_core.from_json(raw)
    except ValueError as err:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RunFileError("this file is not text (not UTF-8), so it is not a specviz run file") from None
        raise RunFileError(f"this file is not valid JSON ({err}); a run file is the JSON that 'export run' "
                           "writes") from None


def _check_format(obj: Mapping[str, Any]) -> None:
    name = obj.get("format")
    if name != FORMAT_NAME:
        shown = "no format name" if name is None else f"format {name!r}"
        raise RunFileError(f"this JSON file is not a specviz run: it has {shown}, expected {FORMAT_NAME!r}")
    version = str(obj.get("version", ""))
    major, mine = version.split(".", 1)[0], int(FORMAT_VERSION.split(".", 1)[0])
    if not major.isdigit():
        raise RunFileError(f"this run file has an unreadable version {version!r} (expected e.g. {FORMAT_VERSION!r})")
    if int(major) > mine:
        raise RunFileError(f"this run file was written by a newer specviz (format version {version}; this one reads "
                           f"{mine}.x): update specviz to open it")


def _config_from_dict(data: dict[str, Any], notes: list[str]) -> DecodeConfig:
    """A DecodeConfig from its validated dict; settings this specviz does not know are ignored, with a note."""
    known = {f.name for f in dataclasses.fields(DecodeConfig)}
    if unknown := sorted(set(data) - known):
        notes.append(f"ignored setting(s) this version of specviz does not know: {', '.join(unknown)}")
    try:
        return DecodeConfig(**{k: v for k, v in data.items() if k in known})
    except (SpecvizError, TypeError) as err:
        raise RunFileError(f"the run file's settings are not valid: {err}") from None


def _traces_from(items: list[dict[str, Any]]) -> tuple[CycleTrace, ...]:
    """The cycles' records from their validated dicts. The views step through a cycle's six
    snapshots, so a cycle without them (recorded with instrument off) cannot be drawn."""
    if not items:
        raise RunFileError("this run file holds no cycles: there is nothing to show")
    for i, item in enumerate(items, start=1):
        if not item.get("snapshots"):
            raise RunFileError(f"cycle {i} was recorded without cache snapshots (instrument off): it cannot be drawn")
    return tuple(record_from_dict(CycleTrace, item) for item in items)


def _first_context(items: list[Any]) -> int:
    """The context the first of a list of cycles started from, as far as the raw file says (the
    schema then checks every position against it and the cycles' own tokens)."""
    first = items[0] if items and isinstance(items[0], dict) else {}
    n = first.get("context_len")
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_POSITIONS else 0


# ---------------------------------------------------------------- the older export


def _from_old_export(items: list[Any]) -> RunRecord:
    """A RunRecord from a bare list of traces (traces_to_json / `walk --json`): the prompt from the
    first cycle's target snapshots, the prefill from its "start" snapshot, the token texts the traces carry."""
    if not items:
        raise RunFileError("this file holds no cycles: there is nothing to show")
    valid = validate_cycles(items, _first_context(items))
    if not valid[0].get("snapshots"):
        raise RunFileError("these cycles were recorded without cache snapshots (instrument off), so the prompt and the "
                           "prefill cannot be rebuilt from them")
    traces = _traces_from(valid)
    first = traces[0]
    prompt_ids = _prompt_from(first)
    start = first.snapshot("start")
    notes = ["rebuilt from an older export (a list of cycles): the prompt and the prefill come from the first "
             "cycle's cache snapshots; max_new_tokens and the seed are not stored there"]
    if first.cycle != 0:
        notes.append(f"the export starts at cycle {first.cycle + 1}: its 'prompt' is the text up to there")
    config = _config_of_old(traces, start.target)
    # A contiguous buffer's hard limit is the context; a paged pool's is rounded to whole pages: exact unless capped.
    max_context = start.target.max_capacity or config.max_context
    reach = start.target.capacity or len(prompt_ids)  # a paged pool tells it to whole pages only
    texts = _texts_carried(traces)
    return RunRecord(
        title=OLD_FORMAT_TITLE, created="", pair="unknown pair (older export)", proposer=first.proposer, config=config,
        max_context=max_context, cache_reach=reach, prompt_text="".join(texts.get(t, f"<{t}>") for t in prompt_ids),
        chat=False, prompt_ids=tuple(prompt_ids), prefill=(start.target, start.draft), traces=traces,
        token_texts=texts, notes=tuple(notes),
    )


def _prompt_from(first: CycleTrace) -> list[int]:
    """The committed tokens x_1..x_n the first cycle started from: after its verify pass the target
    cache holds K/V for all of them (positions 0..n-1), each slot naming its position and token."""
    n = first.context_len
    tokens: dict[int, int] = {}
    for phase in CYCLE_PHASES:
        snap = next((s.target for s in first.snapshots if s.phase == phase), None)
        if snap is None:
            continue
        for slot, (pos, tok) in enumerate(zip(snap.slot_positions, snap.slot_tokens)):
            if 0 <= pos < n and snap.slot_state(slot) in ("committed", "provisional"):
                tokens.setdefault(pos, tok)
    if missing := [p for p in range(n) if p not in tokens]:
        raise RunFileError(f"the first cycle's snapshots do not show every prompt token (positions {missing[:5]} are "
                           "missing), so the prompt cannot be rebuilt")
    return [tokens[p] for p in range(n)]


def _config_of_old(traces: Sequence[CycleTrace], target: CacheSnapshot) -> DecodeConfig:
    """The settings a list of traces shows: sampling from the first cycle, the layout from its
    snapshot; K is the largest any cycle used, max_new_tokens what the run generated."""
    first = traces[0]
    layout: dict[str, Any] = {"cache_layout": target.layout}
    if target.layout == "paged":
        layout.update(page_size=target.page_size, free_policy=target.policy or "free")
    try:
        return DecodeConfig(k=max(1, min(64, max(t.k for t in traces))), proposer=first.proposer,
                            temperature=first.temperature, top_k=first.top_k, top_p=first.top_p,
                            max_new_tokens=max(1, sum(len(t.emitted) for t in traces)), **layout)
    except SpecvizError as err:
        raise RunFileError(f"the cycles' settings are not valid: {err}") from None


def _texts_carried(traces: Iterable[CycleTrace]) -> dict[int, str]:
    """Token texts the traces themselves carry (empty texts -- instrument off -- are not texts)."""
    carried = [(token_id, text) for t in traces for token_id, text in _texts_in(t) if text]
    return dict(reversed(carried))  # each id's first text wins
