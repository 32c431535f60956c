"""The trust boundary for run files: one schema that every recorded run passes before anything draws it.

A run file (`specviz.runfile`) is JSON that someone else may have written: a student's upload, a file
mailed to a teacher, a hand-edited export. The views turn its fields into markup and size loops by
them, and the replay sizes real caches from them (docs/design.md §3, "The trust boundary"), so a file
is validated as a whole, with pydantic v2, before any record is built from it:

* **Types are strict.** An integer is a JSON integer: not `true`, not `1.5`, not `"1"` (a string
  where an integer belongs is how markup gets into a page: `"x'><img onerror=…>"`). A
  probability is a finite number in [0, 1]; times and sizes are finite and never negative.
* **Value sets are closed.** Verdicts, token kinds, cache event kinds, phases, layouts, policies,
  finish reasons, dtypes and merged-proposer sources are the words `trace.py` and the engine use;
  a proposer is a name in the proposer table. An unknown one is refused, not drawn as a blank.
* **Sizes are bounded twice.** Every count, id and storage size is under a hard cap
  (`MAX_POSITIONS`, the longest context specviz draws), and every *position or length* is bounded
  by the run's own tokens: the prompt, what its cycles emitted and the most drafts one cycle held,
  counted from the lists in the file (`positions_limit`), never from a number it claims. A snapshot
  cannot claim a billion slots in a 20-kilobyte file.
* **Indices point inside.** A cycle's `rejected_at` and `num_accepted` fit its drafts, a tree's path
  names its nodes, a cycle's snapshots are its six phases in order: the views index by them.
* **Strings are bounded**; they are text, and the views escape them (`viz/markup.py`).

A file that fails raises `RunFileError` saying where and what, e.g. ``traces[0].drafts[0].index:
expected an integer, got "x'><img src=x onerr…"``, and nothing is built (`describe` makes that
sentence from pydantic's error; other inputs may reuse it). Fields this version does not know
are ignored (a newer minor version only adds optional ones); missing optional fields take the
record's defaults, so files written by earlier versions still load.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from .config import MAX_K, MAX_TREE_NODES, MAX_TREE_WIDTH
from .errors import RunFileError
from .precision import INVARIANT_TOLERANCE
from .proposers import registry
from .trace import CYCLE_PHASES, CyclePhase, EventKind, Phase, TokenKind, Verdict

MAX_POSITIONS = 1 << 17  # positions, slots, blocks: the longest context drawn (131,072; 128k-context models)
MAX_TOKEN_ID = (1 << 31) - 1  # vocabularies are far smaller; ids are int32 on every model specviz loads
MAX_TEXT = 10_000  # characters of one label, note or title (a token's text is a few characters)
MAX_PROMPT_TEXT = 1 << 20  # characters of the prompt as typed
MAX_TOP = 1024  # entries of one top-N list (the config's top_n)
MAX_DRAFTS = max(MAX_K, MAX_TREE_NODES)  # drafts of one cycle: a chain's K or a tree's nodes
SHOWN_CHARS = 40  # of a refused value, echoed in the error
PROB_SLACK = 1e-4  # how far past 1 a recorded probability may be (rounding, see Prob); the views clamp


def positions_limit(prompt_len: int, cycles: list[Any]) -> int:
    """The most positions any cache of this run ever held: the prompt, every token its cycles emitted,
    and the most one cycle appended on top (its drafts; a tree's proposer also the tokens it fed while
    growing the tree, `proposer_fed`), plus one. Counted from the lists in the file (raw,
    before validation: only their lengths are read), capped at MAX_POSITIONS."""
    emitted = drafts = 0
    for cycle in cycles if isinstance(cycles, list) else ():
        if isinstance(cycle, dict):
            emitted += len(cycle["emitted"]) if isinstance(cycle.get("emitted"), list) else 0
            drafts = max(drafts, _length(cycle.get("drafts")) + _length(_get(cycle.get("tree"), "proposer_fed")))
    return min(MAX_POSITIONS, prompt_len + emitted + drafts + 1)


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _within_run(value: Any, info: ValidationInfo) -> Any:
    """A position, a length or a list of positions, no further than the run's own tokens reach."""
    limit = (info.context or {}).get("positions", MAX_POSITIONS)
    top = max(value, default=-1) if isinstance(value, tuple) else value
    if top is not None and top > limit:
        raise ValueError(
            f"{top} is past the {limit} positions this run's own tokens reach "
            "(prompt + generated tokens + one cycle's drafts)"
        )
    return value


def _known_proposer(name: str) -> str:
    if name not in registry.names():
        raise ValueError(f"unknown proposer {name!r}: this specviz knows {', '.join(registry.names())}")
    return name


FinishReason = Literal["eos", "max_new_tokens", "context_full"]
Source = Literal["", "retrieval", "feature head", "both", "prompt lookup", "feature head + prompt lookup"]

_Int = Annotated[int, Strict()]
Count = Annotated[int, Strict(), Field(ge=0, le=MAX_POSITIONS)]  # a size, position or block id
MaybeSlot = Annotated[int, Strict(), Field(ge=-1, le=MAX_POSITIONS)]  # -1: not set / never written
TokenId = Annotated[int, Strict(), Field(ge=0, le=MAX_TOKEN_ID)]
MaybeToken = Annotated[int, Strict(), Field(ge=-1, le=MAX_TOKEN_ID)]
DraftIndex = Annotated[int, Strict(), Field(ge=1, le=MAX_DRAFTS)]
# A probability, up to float32 rounding: a sum of a softmax's terms (alpha = sum min(p, q)) may pass 1 by ~1e-6.
Prob = Annotated[float, Strict(), Field(ge=0, le=1 + PROB_SLACK, allow_inf_nan=False)]
Amount = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]  # a time, a difference
Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
Flag = Annotated[bool, Strict()]
Dtype = Literal[tuple(INVARIANT_TOLERANCE)]  # type: ignore[valid-type]
Position = Annotated[int, Strict(), Field(ge=0, le=MAX_POSITIONS), AfterValidator(_within_run)]
Positions = Annotated[tuple[MaybeSlot, ...], Field(max_length=MAX_POSITIONS), AfterValidator(_within_run)]
Proposer = Annotated[str, Strict(), AfterValidator(_known_proposer)]


class _Model(BaseModel):
    """Fields it does not know are ignored (a newer minor version adds optional ones)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class CacheEventModel(_Model):
    kind: EventKind
    phase: Phase
    start: MaybeSlot = -1  # positions (append, truncate, pointer, move) or storage sizes (grow), by kind
    end: MaybeSlot = -1
    blocks: tuple[Count, ...] = Field(default=(), max_length=MAX_POSITIONS)

    @model_validator(mode="after")
    def _positions(self, info: ValidationInfo) -> CacheEventModel:
        if self.kind in ("append", "truncate", "pointer", "move"):  # the views walk start..end
            _within_run(max(self.start, self.end), info)
        return self


class CacheSnapshotModel(_Model):
    layout: Literal["contiguous", "paged"]
    seq_len: Position
    num_committed: Position
    capacity: Count
    page_size: Annotated[int, Strict(), Field(ge=0, le=1024)]
    num_blocks: Count
    block_table: tuple[Count, ...] = Field(default=(), max_length=MAX_POSITIONS)
    free_blocks: tuple[Count, ...] = Field(default=(), max_length=MAX_POSITIONS)
    policy: Literal["", "free", "keep"] = ""
    slot_positions: Positions = ()
    slot_tokens: tuple[MaybeToken, ...] = Field(default=(), max_length=MAX_POSITIONS)
    max_capacity: Count = 0
    bytes_per_slot: Annotated[int, Strict(), Field(ge=0, le=1 << 40)] = 0

    @model_validator(mode="after")
    def _consistent(self) -> CacheSnapshotModel:
        if self.num_committed > self.seq_len:
            raise ValueError(f"num_committed {self.num_committed} is more than seq_len {self.seq_len}")
        if self.layout == "paged" and self.page_size < 1:
            raise ValueError("a paged snapshot needs a page_size of at least 1")
        return self


class TokenProbModel(_Model):
    token_id: TokenId
    prob: Prob
    text: Text = ""


Tops = Annotated[tuple[TokenProbModel, ...], Field(max_length=MAX_TOP)]


class DraftStepModel(_Model):
    index: DraftIndex
    position: Position
    token_id: TokenId
    text: Text
    draft_prob: Prob
    target_prob: Prob
    ratio: Prob
    u: Prob | None
    verdict: Verdict
    forced: Flag
    draft_top: Tops
    target_top: Tops
    overlap: Prob | None = None
    source: Source = ""


class ContextMatchModel(_Model):
    first: Position
    tokens: tuple[TokenId, ...] = Field(max_length=MAX_POSITIONS)
    source: Literal["datastore", "session"]
    where: Annotated[int, Strict(), Field(ge=0, le=1 << 40)]
    occurrences: Annotated[int, Strict(), Field(ge=0, le=1 << 40)]
    before: tuple[TokenId, ...] = Field(default=(), max_length=64)
    after: tuple[TokenId, ...] = Field(default=(), max_length=64)


class EmittedTokenModel(_Model):
    token_id: TokenId
    text: Text
    position: Position
    kind: TokenKind


class TreeNodeModel(_Model):
    index: DraftIndex
    parent: Annotated[int, Strict(), Field(ge=0, le=MAX_DRAFTS)]
    depth: DraftIndex
    token_id: TokenId
    text: Text
    position: Position
    slot: Count
    draft_prob: Prob
    target_prob: Prob
    accept_prob: Prob | None
    u: Prob | None
    verdict: Verdict


class TreeTraceModel(_Model):
    width: Annotated[int, Strict(), Field(ge=1, le=MAX_TREE_WIDTH)]
    depth: DraftIndex
    budget: Annotated[int, Strict(), Field(ge=0, le=MAX_DRAFTS)]
    root_position: Position
    root_slot: Count
    nodes: tuple[TreeNodeModel, ...] = Field(max_length=MAX_DRAFTS)
    path: tuple[DraftIndex, ...] = Field(max_length=MAX_DRAFTS)
    moves: tuple[tuple[Count, Count], ...] = Field(default=(), max_length=MAX_DRAFTS)
    in_place: Flag = True
    proposer_fed: tuple[TokenId, ...] = Field(default=(), max_length=MAX_POSITIONS)

    @model_validator(mode="after")
    def _indices(self) -> TreeTraceModel:
        for i, node in enumerate(self.nodes, start=1):  # depth-first order: a parent comes before its children
            if node.index != i or node.parent >= i:
                raise ValueError(
                    f"node {i} has index {node.index} and parent {node.parent}: nodes are numbered "
                    "1..N in order, each after its parent"
                )
        if any(p > len(self.nodes) for p in self.path):
            raise ValueError(f"the path {list(self.path)} names a node the tree does not have")
        return self


class AutoChoiceModel(_Model):
    k: Annotated[int, Strict(), Field(ge=0, le=MAX_DRAFTS)]
    expected_tokens: Amount
    cycle_cost: Amount
    expected_speedup: Amount
    reason: Text


class PhaseSnapshotModel(_Model):
    phase: CyclePhase
    target: CacheSnapshotModel
    draft: CacheSnapshotModel | None


class CycleTraceModel(_Model):
    cycle: Count
    context_len: Position
    k: Annotated[int, Strict(), Field(ge=0, le=MAX_DRAFTS)]
    temperature: Amount
    top_k: Annotated[int, Strict(), Field(ge=0, le=MAX_TOKEN_ID)]
    top_p: Prob
    catch_up: tuple[EmittedTokenModel, ...] = Field(max_length=MAX_POSITIONS)
    drafts: tuple[DraftStepModel, ...] = Field(max_length=MAX_DRAFTS)
    num_accepted: Annotated[int, Strict(), Field(ge=0, le=MAX_DRAFTS)]
    rejected_at: DraftIndex | None
    residual_top: Tops
    bonus_top: Tops
    emitted: tuple[EmittedTokenModel, ...] = Field(max_length=MAX_DRAFTS + 1)
    target_events: tuple[CacheEventModel, ...] = Field(max_length=MAX_POSITIONS)
    draft_events: tuple[CacheEventModel, ...] = Field(max_length=MAX_POSITIONS)
    snapshots: tuple[PhaseSnapshotModel, ...] = Field(max_length=len(CYCLE_PHASES))
    timings_ms: dict[Annotated[str, Field(max_length=64)], Amount] = Field(default_factory=dict, max_length=32)
    total_ms: Amount | None = None
    total_ms: Amount | None = None
    invariant_max_abs_diff: dict[Literal["target", "draft"], Amount] | None = None
    finish_reason: FinishReason | None = None
    forced: Flag = False
    proposer: Proposer = "draft"
    proposer_note: Text = ""
    matched: ContextMatchModel | None = None
    tree: TreeTraceModel | None = None
    dtype: Dtype = "float32"
    auto: AutoChoiceModel | None = None

    @model_validator(mode="after")
    def _indices(self) -> CycleTraceModel:
        n = len(self.drafts)
        if self.num_accepted > n or (self.rejected_at or 0) > n:
            raise ValueError(
                f"num_accepted {self.num_accepted} / rejected_at {self.rejected_at} do not fit its {n} drafts"
            )
        if any(d.index != i for i, d in enumerate(self.drafts, start=1)):
            raise ValueError("its drafts are not numbered 1..K in order")
        phases = tuple(s.phase for s in self.snapshots)
        if phases and phases != CYCLE_PHASES:
            raise ValueError(f"its snapshots are for phases {list(phases)}; a cycle records {list(CYCLE_PHASES)}")
        return self


class ConfigModel(_Model):
    """The settings' types and sizes; `DecodeConfig` then checks their ranges and combinations."""

    model_config = ConfigDict(extra="allow", frozen=True)  # runfile notes and drops unknown settings

    k: _Int | Literal["auto"] = 5
    tree_width: _Int = 1
    tree_nodes: _Int = 16
    proposer: Text = "draft"
    lookup_max_ngram: _Int = 3
    lookup_min_ngram: _Int = 1
    draft_confidence: Amount = 0.0
    temperature: Amount = 1.0
    top_k: Annotated[int, Strict(), Field(ge=0, le=MAX_TOKEN_ID)] = 0
    top_p: Amount = 1.0
    seed: Annotated[int, Strict(), Field(ge=-(1 << 63), lt=1 << 64)] = 0
    cache_layout: Literal["contiguous", "paged"] = "paged"
    page_size: _Int = 16
    free_policy: Literal["free", "keep"] = "free"
    num_blocks: Count | None = None
    max_context: Count = 2048
    max_new_tokens: Count = 256
    check_invariant: Flag = False
    top_n: Annotated[int, Strict(), Field(ge=1, le=MAX_TOP)] = 8
    instrument: Flag = True
    forced_outcomes: tuple[tuple[DraftIndex, Flag], ...] = Field(default=(), max_length=MAX_DRAFTS)


class CostLawModel(_Model):
    """The recording machine's cost law (`specviz.costlaw.CostLaw`): v(N) at increasing N from 1."""

    ns: tuple[Annotated[int, Strict(), Field(ge=1, le=MAX_TREE_NODES + 1)], ...] = Field(
        min_length=1, max_length=MAX_TREE_NODES + 1
    )
    verify: tuple[Amount, ...] = Field(min_length=1, max_length=MAX_TREE_NODES + 1)
    step_ms: Amount
    draft_cost: dict[Proposer, Amount] = Field(default_factory=dict)
    machine: Text = ""

    @model_validator(mode="after")
    def _curve(self) -> CostLawModel:
        if len(self.ns) != len(self.verify) or list(self.ns) != sorted(set(self.ns)) or self.ns[0] != 1:
            raise ValueError("ns must rise from 1, with one v(N) for each")
        return self


class PollResultModel(_Model):
    """A live lecture's question and the class's anonymous answers (`specviz.room.Poll.result`)."""

    cycle: Count
    kind: Literal["accepted", "path"]
    text: Text
    options: tuple[Text, ...] = Field(min_length=1, max_length=MAX_DRAFTS + 1)
    counts: tuple[Count, ...] = Field(max_length=MAX_DRAFTS + 1)
    truth: Count
    revealed: Flag = True

    @model_validator(mode="after")
    def _fits(self) -> PollResultModel:
        if len(self.counts) != len(self.options) or self.truth >= len(self.options):
            raise ValueError("a poll has one count per option, and its truth is one of them")
        return self


class RunFileModel(_Model):
    """A run file's fields (format and version are checked first, by `runfile`, for their own messages)."""

    title: Text = ""
    created: Text = ""
    pair: Text = ""
    proposer: Proposer | None = None
    config: ConfigModel
    max_context: Annotated[int, Strict(), Field(ge=1, le=MAX_POSITIONS)] | None = None
    cache_reach: Annotated[int, Strict(), Field(ge=1, le=MAX_POSITIONS)] | None = None
    prompt_text: Annotated[str, Strict(), Field(max_length=MAX_PROMPT_TEXT)] = ""
    chat: Flag = False
    prompt_ids: tuple[TokenId, ...] = Field(min_length=1, max_length=MAX_POSITIONS)
    prefill: tuple[CacheSnapshotModel, CacheSnapshotModel | None]
    # Each cycle is validated on its own (`validate_cycles`): one call per cycle, not one for the whole
    # file, so a server's other sessions run between them (a validation call holds the GIL throughout).
    traces: tuple[dict[str, Any], ...] = Field(min_length=1, max_length=MAX_POSITIONS)
    baseline_ms_per_token: Amount | None = None
    cost_law: CostLawModel | None = None
    polls: tuple[PollResultModel, ...] = Field(default=(), max_length=MAX_POSITIONS)
    token_texts: dict[Annotated[str, Field(pattern=r"^\d{1,10}$")], Text] = Field(max_length=MAX_POSITIONS)


def validate_run(obj: dict[str, Any]) -> dict[str, Any]:
    """The run file's fields, validated (see the module docstring), as plain data whose records
    `trace.record_from_dict` builds; fields the file left out are left out (the records' defaults
    apply). Raises RunFileError naming the first field that fails."""
    prompt = obj.get("prompt_ids")
    limit = positions_limit(len(prompt) if isinstance(prompt, list) else 0, obj.get("traces"))
    try:
        valid = RunFileModel.model_validate(obj, context={"positions": limit})
    except ValidationError as err:
        loc = err.errors(include_url=False)[0]["loc"]
        what = f"cycle {loc[1] + 1} of the file" if loc[:1] == ("traces",) and len(loc) > 1 else "this run file"
        raise RunFileError(f"{what} cannot be read: {describe(err)}") from None
    return valid.model_dump(exclude_unset=True, exclude={"traces"}) | {
        "traces": _cycles(obj["traces"], limit, "traces")
    }


def validate_cycles(items: list[Any], prompt_len: int) -> list[dict[str, Any]]:
    """A list of cycle records (the older export, `traces_to_json`), validated like a run file's
    `traces`; `prompt_len` is the context the first one started from."""
    return _cycles(items, positions_limit(prompt_len, items), "")


def _cycles(items: list[Any], limit: int, where: str) -> list[dict[str, Any]]:
    """Each cycle validated on its own, in order; the first that fails is named (`where[i]...`)."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(
                CycleTraceModel.model_validate(item, context={"positions": limit}).model_dump(exclude_unset=True)
            )
        except ValidationError as err:
            raise RunFileError(
                f"cycle {i + 1} of the file cannot be read: {describe(err, where and f'{where}[{i}]')}"
            ) from None
    return out


_WHAT = {  # pydantic's error types in the words of this project
    "int_type": "expected an integer", "int_from_float": "expected an integer", "bool_type": "expected true or false",
    "float_type": "expected a number", "finite_number": "expected a finite number", "string_type": "expected text",
    "tuple_type": "expected a list", "list_type": "expected a list", "dict_type": "expected an object",
    "model_type": "expected an object", "missing": "is missing", "none_required": "expected null",
}  # fmt: skip


_UNION_TAG = re.compile(r"^(int|float|str|bool|literal\[.*\]|\[key\]|function-after\[.*\])$")


def describe(err: ValidationError, prefix: str = "") -> str:
    """The first problem of a pydantic error as one sentence: where (`traces[0].drafts[0].index`; its
    place under `prefix`), what was expected, and the value found, cut to SHOWN_CHARS characters."""
    first = err.errors(include_url=False)[0]
    loc = [p for p in first["loc"] if not _UNION_TAG.match(str(p))]  # a union's member names are not places
    where = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    where = where.lstrip(".") or "the file"
    kind, ctx = first["type"], first.get("ctx") or {}
    if kind in _WHAT:
        what = _WHAT[kind]
    elif kind == "literal_error":
        what = f"expected one of {ctx.get('expected', '')}"
    elif kind in ("less_than_equal", "less_than", "greater_than_equal", "greater_than"):
        bound = next(iter(ctx.values()), "")
        what = {
            "less_than_equal": "at most",
            "less_than": "less than",
            "greater_than_equal": "at least",
            "greater_than": "more than",
        }[kind] + f" {bound} allowed"
    elif kind in ("too_long", "too_short"):
        what = f"{'too many' if kind == 'too_long' else 'too few'} entries ({first['msg'].split('should ')[-1]})"
    elif kind == "value_error":
        return f"{where}: {first['msg'].removeprefix('Value error, ')}"
    else:
        what = first["msg"]
    return f"{where}: {what}" if kind == "missing" else f"{where}: {what}, got {shown(first.get('input'))}"


def shown(value: Any) -> str:
    """A refused value as the error echoes it: its repr, cut to SHOWN_CHARS characters."""
    if isinstance(value, (dict, list)):
        return f"a{'n object' if isinstance(value, dict) else ' list'} of {len(value)}"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
