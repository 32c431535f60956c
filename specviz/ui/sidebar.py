"""The sidebar: every control, within this server's limits, turned into a `DecodeConfig`.

**Live** settings (`LIVE`: K, the tree, sampling, max new tokens, the invariant check, what-if) apply
from the next cycle; **restart** ones (`RESTART_WIDGETS`, one widget each: the pair, precision,
proposer, prompt, cache, seed, …) start a new run, the earlier one staying in the run list. Showing
an earlier run writes its values back into these widgets.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from ..config import AUTO, LAYOUTS, POLICIES, DecodeConfig
from ..errors import SpecvizError
from ..models import preferred_proposer
from ..precision import DEFAULT_DTYPE, INVARIANT_TOLERANCE
from ..proposers import registry
from ..server import ServerSettings

PAIR_LABELS = {
    "default": "Default: SmolLM2-135M-Instruct + trained draft",
    "tiny": "Tiny random pair (instant; for demos of the mechanics)",
    "custom": "Custom: hub ids or local directories",
}
# The prompt a page opens on: on the default pair (T = 1, seed 0, K = 5) it runs 18 cycles before the
# text ends, with 4, 4, 3 and 4 drafts accepted along the way (tests/test_app.py measures it).
DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue during the day and red at sunset."
EXAMPLES_FILE = Path(__file__).resolve().parents[2] / "assets" / "prompts" / "examples.json"
SPEEDS = {"slow (2 s)": 2.0, "normal (1 s)": 1.0, "fast (0.5 s)": 0.5}
PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64)
K_MODES = {"auto": "Auto (this machine's cost law)", "fixed": "Fixed K"}
LIVE = ("k", "tree_width", "tree_nodes", "temperature", "top_k", "top_p", "check_invariant", "max_new_tokens",
        "forced_outcomes")
# (widget key, what it is called in "restarted because the … changed"): the settings of a run.
RESTART_WIDGETS = (
    ("pair_kind", "model pair"), ("custom_target", "target"), ("custom_draft", "draft"), ("proposer", "proposer"),
    ("prompt", "prompt"), ("chat", "chat template"), ("layout", "cache layout"), ("page_size", "page size"),
    ("policy", "rollback policy"), ("seed", "seed"), ("num_blocks", "pool size"), ("max_context", "max context"),
    ("dtype", "precision"),
)  # fmt: skip


@dataclass(frozen=True)
class Controls:
    """What the sidebar asks for. `config.proposer` is filled in once the pair is loaded."""

    kind: str
    target: str
    draft: str
    prompt: str
    chat: bool
    config: DecodeConfig
    proposer_slot: Any  # the sidebar container the proposer selector goes into
    dtype: str = DEFAULT_DTYPE  # the pair's precision (specviz.precision): part of the pair, so a restart setting

    def restart_key(self) -> tuple:
        c = self.config
        return (
            self.kind, self.target, self.draft, c.proposer, self.prompt, self.chat,
            c.cache_layout, c.page_size, c.free_policy, c.seed, c.num_blocks, c.max_context, self.dtype,
        )  # fmt: skip


def key_without_proposer(key: tuple) -> tuple:
    """A run key minus the proposer: what a recording (shown without loading the pair, so without
    the proposer selector) compares with the sidebar to tell whether a new live run is wanted."""
    return key[:3] + key[4:]


def changed_settings(old_key: tuple, new_key: tuple) -> list[str]:
    """Names of the restart settings that differ between two run keys."""
    names = [name for _, name in RESTART_WIDGETS]
    if len(old_key) == len(new_key) - 1:  # a recording's key has no proposer
        names, new_key = names[:3] + names[4:], key_without_proposer(new_key)
    return [name for name, a, b in zip(names, old_key, new_key, strict=True) if a != b]


def widget_values() -> dict[str, Any]:
    """The restart widgets' current values (stored with a run to show it again later)."""
    return {key: st.session_state.get(key) for key, _ in RESTART_WIDGETS}


def restore_widgets(values: dict[str, Any]) -> None:
    """Put a run's settings back into the sidebar (in a callback, before the widgets are drawn)."""
    st.session_state.update(values, _proposer_auto=False)  # the run's proposer, not the pair's preference


def example_prompts() -> list[str]:
    try:
        return [str(p) for p in json.loads(EXAMPLES_FILE.read_text())] or [DEFAULT_PROMPT]
    except (OSError, ValueError):
        return [DEFAULT_PROMPT]


def init_state() -> None:
    for key, value in {**_defaults(), "_proposer_auto": True}.items():  # "proposer" is set once a pair is loaded
        st.session_state.setdefault(key, value)
    # New runs let this machine's cost law choose K; the tiny random pair (a toy whose draft is as big as
    # its target, so the law always picks plain steps) opens on a fixed K, where the mechanism shows.
    st.session_state.setdefault("k_mode", "fixed" if st.session_state.pair_kind == "tiny" else "auto")


# Page settings outside the sidebar's defaults that a reload brings back too (`page_settings`).
OTHER_SETTINGS = ("k_mode", "proposer", "_proposer_auto", "compare_on", "compare_layout", "compare_page",
                  "compare_policy", "more", "tab")


def page_settings() -> dict[str, Any]:
    """The page's settings as they are (every sidebar widget, the comparison, the open tab): what a
    reloaded page's new session starts from (`session.open_workspace`)."""
    ss = st.session_state
    return {key: ss[key] for key in (*_defaults(), *OTHER_SETTINGS) if key in ss}


def _defaults() -> dict[str, Any]:
    env_pair = os.environ.get("SPECVIZ_PAIR", "default")
    return dict(
        pair_kind=env_pair if env_pair in PAIR_LABELS else "default",
        custom_target=os.environ.get("SPECVIZ_TARGET", ""), custom_draft=os.environ.get("SPECVIZ_DRAFT", ""),
        prompt=DEFAULT_PROMPT, example=DEFAULT_PROMPT, chat=True,
        k=5, tree_width=1, tree_nodes=16,  # tree width 1 = a chain (docs/design.md §1c): trees are opt-in
        temperature=1.0, top_k=0, top_p=1.0, max_new=128,
        layout="paged", page_size=4 if env_pair == "tiny" else 16,  # tiny's short prompts: small pages show traffic
        num_blocks=0, max_context=2048, dtype=DEFAULT_DTYPE, policy="free", seed=0,
        check=False, speed="normal (1 s)", whatif=False, force_accept=[], force_reject=[], lecture=False, quiz=False,
    )  # fmt: skip


def apply_limits(settings: ServerSettings) -> list[str]:
    """Bring this session's values within the server's limits before the widgets are drawn (a
    widget refuses a value past its bounds); returns what was changed, to say so."""
    ss = st.session_state
    notes = []
    allowed = settings.allowed_pairs(PAIR_LABELS)
    if ss.get("pair_kind") not in allowed:
        server_pair = os.environ.get("SPECVIZ_PAIR", "default")
        ss.pair_kind = server_pair if server_pair in allowed else "default"
        notes.append("Custom model pairs are disabled on this classroom server: the server's own pair is used.")
    keys = {"k": ("k", "K"), "max_new_tokens": ("max_new", "Max new tokens"), "lab_n": ("lab_n", "The lab's N"),
            "tree_width": ("tree_width", "Tree width"), "tree_nodes": ("tree_nodes", "Tree nodes")}
    current = {name: int(ss.get(key, 0) or 0) for name, (key, _) in keys.items()}
    for name, cap in settings.clamp(current).items():
        key, label = keys[name]
        ss[key] = cap
        notes.append(f"{label} lowered from {current[name]} to {cap}: the limit on this classroom server.")
    if ss.get("dtype", DEFAULT_DTYPE) not in (dtypes := settings.limits.dtypes):
        notes.append(f"Precision {ss.dtype} is off on this classroom server (each precision is another copy of the "
                     f"models in memory): {dtypes[0]} is used.")
        ss.dtype = dtypes[0]
    return notes


def sidebar(settings: ServerSettings, on_walkthrough: Any) -> Controls | None:
    """All controls; None (with the error shown) when they do not make a valid config."""
    try:
        return _sidebar(settings, on_walkthrough)
    except SpecvizError as exc:  # e.g. an invalid DecodeConfig
        st.error(str(exc), icon=":material/error:")
        return None


def _sidebar(settings: ServerSettings, on_walkthrough: Any) -> Controls:
    ss = st.session_state
    with st.sidebar:
        _header(settings)
        kind, target, draft = _pair_controls(settings)
        dtype = st.radio(
            "Precision — changing it starts a new run", settings.limits.dtypes, key="dtype", horizontal=True,
            help="The number format both models and their KV caches run in. float32: the exactness demo. "
            "bfloat16: half the memory, and faster where the CPU (AMX) or GPU has bfloat16 units. Exactness is "
            "relative to the model as run; the invariant check allows each format's rounding "
            f"(max |ΔK/V| ≤ {INVARIANT_TOLERANCE['float32']:g} in float32, ≤ {INVARIANT_TOLERANCE['bfloat16']:g} "
            "in bfloat16).",
        )  # fmt: skip
        proposer_slot = st.container()
        prompt, chat = _prompt_controls(settings.limits.prompt_chars)
        sampling = _sampling_controls(settings)
        cache = _cache_controls()
        seed = st.number_input("Seed", 0, 2**31 - 1, step=1, key="seed")
        check = st.toggle(
            "Check the cache invariant every cycle", key="check",
            help="Compare both caches with a fresh prefill of the committed sequence (slower). The largest "
            "difference is judged by the precision's tolerance (rounding, not a bug).",
        )  # fmt: skip
        st.markdown("**Play**")
        st.select_slider("Play speed", list(SPEEDS), key="speed")
        whatif = _whatif_controls(on_walkthrough, tree=sampling["tree_width"] > 1)
    forced: tuple[tuple[int, bool], ...] = ()
    if whatif and sampling["tree_width"] == 1:  # forcing is for chains only (the config refuses it on a tree)
        forced = tuple(sorted([(i, True) for i in ss.force_accept] + [(i, False) for i in ss.force_reject]))
    settings.check_config(int(ss.k), sampling["max_new_tokens"], sampling["tree_width"], sampling["tree_nodes"],
                          dtype)  # behind the widgets' bounds: never past a cap
    cfg = DecodeConfig(**sampling, **cache, seed=int(seed), check_invariant=bool(check), forced_outcomes=forced)
    return Controls(kind, target.strip(), draft.strip(), prompt, chat, cfg, proposer_slot, dtype)


def _header(settings: ServerSettings) -> None:
    st.markdown("### :material/visibility: specviz")
    if settings.classroom:
        st.info(settings.sidebar_markdown(), icon=":material/school:")
    st.toggle("Lecture mode (bigger type, fewer panels)", key="lecture")
    st.toggle(
        "Quiz: predict the outcome before it is shown", key="quiz",
        help="After the verify phase the page asks how many drafts will pass and what the rollback drops "
        "(for a token tree: which path the target will accept), then reveals and scores.",
    )  # fmt: skip


def _pair_controls(settings: ServerSettings) -> tuple[str, str, str]:
    kind = st.radio("Model pair", settings.allowed_pairs(PAIR_LABELS), format_func=PAIR_LABELS.get, key="pair_kind")
    if kind != "custom":
        return kind, "", ""
    target = st.text_input("Target (hub id or directory)", key="custom_target",
                           placeholder="HuggingFaceTB/SmolLM2-360M-Instruct")
    draft = st.text_input("Draft (hub id or directory)", key="custom_draft",
                          placeholder="HuggingFaceTB/SmolLM2-135M-Instruct")
    return kind, target, draft


def _prompt_controls(max_chars: int) -> tuple[str, bool]:
    st.markdown("**Prompt**")
    ss = st.session_state
    examples = example_prompts()
    # The menu names the prompt in the box, or none: after another prompt was typed (or a scenario or
    # an earlier run put one there) it must not still show the last example picked.
    if ss.get("example") != ss.get("prompt"):
        ss.example = ss.get("prompt") if ss.get("prompt") in examples else None
    st.selectbox(
        "Example prompts", examples, key="example", on_change=_use_example, label_visibility="collapsed",
        placeholder="Example prompts…",
    )  # fmt: skip
    prompt = st.text_area("Prompt", key="prompt", height=90, max_chars=max_chars)
    if not prompt.strip():  # said here, where it is fixed: the stage keeps the run it shows (app.ensure_run)
        st.error("The prompt is empty: type something for the model to continue. The stage keeps the run it shows.",
                 icon=":material/edit_note:")
    chat = st.toggle(
        "Apply the chat template", key="chat",
        help="Wrap the prompt as a user message with the tokenizer's chat template "
        "(when it has one). Off: the raw text is the prompt.",
    )  # fmt: skip
    return prompt, chat


def _sampling_controls(settings: ServerSettings) -> dict[str, Any]:
    """The live settings (they apply from the next cycle), as DecodeConfig fields."""
    lim = settings.limits
    st.markdown("**Sampling** — applies from the next cycle")
    auto = st.radio(
        "Drafts per cycle", K_MODES, key="k_mode", format_func=K_MODES.get, horizontal=True,
        help="Auto: before each cycle, this machine's measured cost law (the verify cost v(N), the draft's "
        "cost and the acceptance seen so far) picks the K that maximises tokens per second, 0 included (a "
        "plain step); a tree gets its node budget the same way. The Statistics tab draws the law.",
    ) == "auto"  # fmt: skip
    k = st.slider("K (draft length; a tree's depth)", 1, lim.k, key="k", disabled=auto)
    tree_width, tree_nodes = _tree_controls(lim.tree_width, lim.tree_nodes)
    temperature = st.slider("Temperature (0 = greedy)", 0.0, 2.0, step=0.05, key="temperature")
    c1, c2 = st.columns(2)
    top_k = c1.number_input("top-k (0 = off)", 0, 100000, step=1, key="top_k")
    top_p = c2.number_input("top-p (1 = off)", 0.01, 1.0, step=0.05, key="top_p")
    max_new = st.number_input("Max new tokens", 1, lim.max_new_tokens, step=16, key="max_new")
    return dict(k=AUTO if auto else int(k), tree_width=tree_width, tree_nodes=tree_nodes,
                temperature=float(temperature), top_k=int(top_k), top_p=float(top_p), max_new_tokens=int(max_new))


def _cache_controls() -> dict[str, Any]:
    """The cache settings (each starts a new run), as DecodeConfig fields."""
    st.markdown("**Cache** — changing these starts a new run (earlier runs stay in the run list)")
    layout = st.radio("Cache layout", LAYOUTS, key="layout", horizontal=True)
    paged = layout == "paged"
    page = st.select_slider("Page size (tokens per block)", PAGE_SIZES, key="page_size", disabled=not paged)
    policy = st.radio(
        "Paged rollback policy", POLICIES, key="policy", horizontal=True, disabled=not paged,
        help="free: blocks holding only rejected positions return to the pool. "
        "keep (vLLM v1): they stay reserved and are overwritten.",
    )  # fmt: skip
    with st.expander("Pool and context limits"):
        num_blocks = st.number_input(
            "Blocks in each pool (0 = enough for the context)", 0, 65536, step=1, key="num_blocks",
            disabled=not paged, help="A small pool shows what happens when the BlockPool runs out.",
        )  # fmt: skip
        max_context = st.number_input("Max context (positions)", 16, 32768, step=64, key="max_context")
    return dict(cache_layout=layout, page_size=int(page), free_policy=policy, max_context=int(max_context),
                num_blocks=int(num_blocks) if num_blocks and paged else None)


def proposer_control(pair: Any) -> str:
    """The proposer selector, for a loaded pair: the proposer table's rows this pair can run (a
    caption says why each other one is missing). It follows `preferred_proposer(pair)` until the
    user picks one. Changing it starts a new run, like the cache settings."""
    ss = st.session_state
    options = [entry.name for entry in registry.available(pair)]
    if ss.get("_proposer_auto", True) or ss.get("proposer") not in options:
        preferred = preferred_proposer(pair)
        ss.proposer = preferred if preferred in options else options[0]
    st.radio(
        "Proposer — changing it starts a new run", options, key="proposer", on_change=_on_proposer_pick,
        format_func=lambda name: registry.get(name).label,
        help="Who guesses the K drafts. The target's verify, the acceptance test, the residual, the bonus "
        "and the target's rollback are the same for all of them, and so is exactness.",
    )  # fmt: skip
    for entry in registry.entries():
        if why := entry.unavailable(pair):
            st.caption(f"{registry.cap(entry.words.noun)}: unavailable — {why}.")
    return ss.proposer


def _on_proposer_pick() -> None:
    st.session_state._proposer_auto = False  # the user chose: stop following the pair's preference


def _use_example() -> None:
    if st.session_state.example is not None:
        st.session_state.prompt = st.session_state.example


def _tree_controls(max_width: int, max_nodes: int) -> tuple[int, int]:
    """The token-tree shape next to K (docs/design.md §1c): width 1 is the chain; live like K."""
    c1, c2 = st.columns(2)
    width = c1.number_input(
        "Tree width (1 = chain)", 1, max_width, step=1, key="tree_width",
        help="Children kept per expanded node. Above 1 the proposer grows a token tree of depth K (EAGLE-2 "
        "style), the target verifies every node in one pass under a tree attention mask, and the path it agrees "
        "with is committed; its K/V are then moved into place (the compaction). Applies from the next cycle.",
    )  # fmt: skip
    nodes = c2.number_input(
        "Tree nodes (budget)", 1, max_nodes, step=1, key="tree_nodes", disabled=width == 1,
        help="The most draft nodes one verify pass holds (the best ones by the proposer's cumulative "
        "probability, each with its ancestors).",
    )  # fmt: skip
    return int(width), int(nodes)


def _whatif_controls(on_walkthrough: Any, tree: bool = False) -> bool:
    with st.expander("What-if (teaching) mode", icon=":material/science:",
                     expanded=st.session_state.get("whatif", False)):
        if tree:
            st.caption("**Not with a token tree**: forcing names chain positions d1…dK, and a tree's verdicts follow "
                       "its walk. Set the tree width to 1 (a chain) to force outcomes.")
        st.caption("Force the outcome of chosen acceptance tests in the **next cycle only**, to stage a scenario. "
                   "**This breaks exactness**: forced cycles are marked in every view and left out of the statistics. "
                   "After that one cycle the toggle switches itself off and decoding is exact again. Forcing stops at "
                   "an end-of-text draft — from there the real test decides — so a forced acceptance never ends the "
                   "text.")
        on = st.toggle("Force outcomes in the next cycle (breaks exactness)", key="whatif", disabled=tree)
        positions = list(range(1, 17))
        st.multiselect("Force accept at draft positions", positions, key="force_accept", disabled=not on)
        st.multiselect("Force reject at draft positions", positions, key="force_reject", disabled=not on)
        st.button("Walkthrough scenario (one cycle): K = 5, d1–d3 accepted, d4 rejected", key="scenario",
                  on_click=on_walkthrough, width="stretch", disabled=tree)
        st.caption("Exact scenarios, found by seed rather than forced, are in the sidebar's **Scenario gallery**.")
    return on
