"""specviz — watch exact speculative decoding happen, one phase at a time.

    streamlit run app.py                 # the embedded default pair (SmolLM2-135M-Instruct + draft)
    SPECVIZ_PAIR=tiny streamlit run app.py   # a tiny random pair: instant start, for tests and dev
    SPECVIZ_PAIR=custom SPECVIZ_TARGET=dir-or-id SPECVIZ_DRAFT=dir-or-id streamlit run app.py
    SPECVIZ_THREADS=N                        # torch threads (default: the cores shared among decoding slots)
    SPECVIZ_CLASSROOM=1                      # lock a shared server down (specviz.server; also .streamlit/specviz.toml)
    SPECVIZ_MAX_DECODING=N, SPECVIZ_IDLE_SECONDS=S   # sessions decoding at once; release idle caches after S s
    SPECVIZ_TINY_EOS=1                       # the tiny pair can emit end-of-text (tests of how a text ends)

This file is Streamlit only: layout, widgets, session state and cached model loading. All math
lives in the engine (`specviz.SpeculativeDecoder` computes a whole cycle per `step()` and returns
a `CycleTrace`); all pictures are pure functions of traces in `specviz.viz`; all explanations come
from `specviz.narrative`. The app *reveals* a recorded cycle phase by phase, and history
navigation replays recorded traces — nothing is recomputed. Who proposes the drafts (a draft
model, an EAGLE-style feature head, or prompt lookup: DESIGN §1b) is a sidebar setting that opens
on `preferred_proposer(pair)` and restarts the run when changed, like the cache settings.

State discipline: every click computes the new immutable `Session` first and assigns it to the
browser session's `Holder` in one statement, under the session's lock, so an error (or a click
arriving mid-step) never leaves a half-updated state. The model pair is loaded once per process
(a `st.cache_resource` store) and shared read-only by all browser sessions; each session has its
own decoder, caches and history. Streamlit settings (fast reruns off, theme) live in
`.streamlit/config.toml`.

What-if mode is scoped (`specviz.whatif`): it forces the next cycle only, then the toggle switches
itself off with a note; forcing stops at an end-of-text draft, so it never ends the text by
surprise; forced cycles are marked in every view and left out of the statistics. Reset asks before
it clears recorded cycles. Cycles are numbered from 1 on screen (0-based in the traces).

Sharing one server (`specviz.server`, `specviz.gate`, `specviz.parking`): every model run (a
cycle, a prefill, the baseline, the lab) takes a slot of a process-wide gate, so at most
`max_decoding` sessions decode at once and a waiting page says how many are ahead of it; a
session idle for `idle_seconds` has its decoder parked (caches freed, history kept) and rebuilt
exactly on its next action; in classroom mode custom pairs are off and inputs are capped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# pandas is imported here, before any session draws a table: Streamlit imports it lazily on first
# use and checks types through sys.modules, so two sessions drawing their first table at once could
# meet a half-imported pandas ("partially initialized module 'pandas' has no attribute 'Series'",
# seen with 8 concurrent sessions in bench/load.py).
import pandas  # noqa: F401
import streamlit as st

import specviz
from specviz import narrative, parking, whatif
from specviz.config import DecodeConfig
from specviz.errors import SpecvizError
from specviz.gate import shared_gate
from specviz.lab import LabResult, run_exactness_lab
from specviz.models import preferred_proposer
from specviz.server import ServerSettings
from specviz.stats import acceptance_stats, cycle_costs, cycle_rows, measured_speedup
from specviz.trace import CYCLE_PHASES, CacheSnapshot, CycleTrace, traces_to_json
from specviz.viz import acceptance, distributions, exactness, kv, proposals, statistics, tokens
from specviz.viz.style import PHASE_TITLES

PAIR_LABELS = {
    "default": "Default: SmolLM2-135M-Instruct + trained draft",
    "tiny": "Tiny random pair (instant; for demos of the mechanics)",
    "custom": "Custom: hub ids or local directories",
}
# Who guesses the K drafts (DESIGN §1b); the selector opens on `preferred_proposer(pair)`.
PROPOSER_LABELS = {
    "draft": "Draft model (a small LM)",
    "feature": "Feature head (EAGLE-style)",
    "lookup": "Prompt lookup (n-gram copy)",
}
DEFAULT_PROMPT = "Explain in two sentences why the sky is blue."
EXAMPLES_FILE = Path(__file__).parent / "assets" / "prompts" / "examples.json"
PHASES_PER_CYCLE = len(CYCLE_PHASES) - 1  # "start" of cycle c+1 is "rollback" of cycle c
SPEEDS = {"slow (2 s)": 2.0, "normal (1 s)": 1.0, "fast (0.5 s)": 0.5}
LIVE = ("k", "temperature", "top_k", "top_p", "check_invariant", "max_new_tokens", "forced_outcomes")
WALKTHROUGH = ((1, True), (2, True), (3, True), (4, False))


def configure_threads(settings: ServerSettings) -> None:
    """Torch's intra-op thread count for this server process (process-wide: every script thread
    picks it up). Up to `max_decoding` sessions decode at once, each with its own team of this
    many threads, so the cores are divided among them (`ServerSettings.threads_per_step`): 1 on
    ≤ 2 cores, where OpenMP's busy-waiting also made a 5-token verify pass ~6 s on 2 threads vs
    ~0.16 s on 1 under load (bench/threads.py). SPECVIZ_THREADS=N overrides.
    """
    import torch  # already imported by specviz; only the thread count is set here

    wanted = settings.threads_per_step()
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


def server_settings() -> ServerSettings:
    """This server's settings (environment over .streamlit/specviz.toml; read on every run, cheap)."""
    return ServerSettings.load()


@contextmanager
def decoding_slot() -> Iterator[None]:
    """Hold one of the server's decoding slots while a model runs (`specviz.gate`). While the
    slots are taken the page says so, with the session's place in the queue, instead of freezing;
    after `busy_timeout` the action fails with a clear message and nothing changes."""
    settings = server_settings()
    box: Any = None

    def waiting(place: Any) -> None:
        nonlocal box
        if box is None:
            box = st.empty()
        box.warning(place.message(), icon=":material/hourglass_top:")

    with shared_gate(settings.max_decoding).slot(on_wait=waiting, timeout=settings.busy_timeout) as waited:
        if box is not None:
            box.empty()
        if waited >= 1.0:
            holder().waited_note = (
                f"Waited {waited:.0f} s for a free decoding slot: this server decodes at most "
                f"{settings.max_decoding} session(s) at once."
            )
        yield


st.set_page_config(
    page_title="specviz — speculative decoding, exactly", page_icon=":material/visibility:", layout="wide"
)


# ---------------------------------------------------------------- model loading (shared) -----


@st.cache_resource(show_spinner=False)
def _pair_store() -> dict[str, Any]:
    """Process-wide store of loaded pairs, shared read-only by every browser session.

    A plain `st.cache_resource` on the loader itself cannot show progress: Streamlit would try to
    replay the progress bar (created outside the function) on cache hits and refuses to. So the
    store is the cached resource, and loading happens outside the cache, under a lock (a second
    session asking for the same pair waits for the first load instead of loading it twice).
    """
    return {"lock": threading.Lock(), "pairs": {}}


MAX_PAIRS = 3  # loaded pairs kept in memory; the oldest is dropped first


def load_pair_cached(kind: str, target: str = "", draft: str = "", progress: Any = None) -> Any:
    store = _pair_store()
    tiny_eos = kind == "tiny" and os.environ.get("SPECVIZ_TINY_EOS") == "1"
    key = (kind, target, draft, tiny_eos)
    with store["lock"]:
        pairs: dict = store["pairs"]
        if key not in pairs:
            if kind == "tiny":
                pair = specviz.build_tiny_pair(seed=0, with_eos=tiny_eos)
            elif kind == "default":
                pair = specviz.load_default_pair(progress=progress)
            else:
                pair = specviz.load_pair(target=target, draft=draft, progress=progress)
            while len(pairs) >= MAX_PAIRS:
                pairs.pop(next(iter(pairs)))
            pairs[key] = pair  # errors raise before this line: failures are never cached
        return pairs[key]


def example_prompts() -> list[str]:
    try:
        data = json.loads(EXAMPLES_FILE.read_text())
        return [str(p) for p in data] or [DEFAULT_PROMPT]
    except (OSError, ValueError):
        return [DEFAULT_PROMPT]


# ---------------------------------------------------------------- session model ----------------


@dataclass(frozen=True)
class Session:
    """Everything one browser session shows. Replaced as a whole, never mutated in place
    (the decoder inside is the one mutable object; it only changes inside `step()`, which
    leaves it untouched when it raises)."""

    restart_key: tuple
    pair: Any
    dec: Any  # specviz.SpeculativeDecoder; None while parked (an idle session's caches released)
    prompt_ids: tuple[int, ...]
    prefill: tuple[CacheSnapshot, CacheSnapshot | None]  # target, proposer (None: prompt lookup keeps no cache)
    traces: tuple[CycleTrace, ...] = ()
    revealed: int = 0  # furthest step of the timeline shown so far
    view: int = 0  # the step shown now (0 = after prefill; 5c+p = cycle c, phase p)
    baseline_ms_per_token: float | None = None
    baseline_tokens: int = 0
    lab: LabResult | None = None
    notices: tuple[str, ...] = field(default_factory=tuple)
    parked: parking.ParkedDecoder | None = None  # what rebuilds `dec` exactly (specviz.parking)


def view_of(step: int, sess: Session) -> tuple[int | None, str]:
    """(cycle index or None before the first cycle, phase name) of a timeline step."""
    if step == 0:
        return (0, "start") if sess.traces else (None, "prefill")
    c, p = divmod(step - 1, PHASES_PER_CYCLE)
    return c, CYCLE_PHASES[p + 1]


def encode_prompt(tokenizer: Any, text: str, chat: bool) -> list[int]:
    if not text.strip():
        raise specviz.PromptError("The prompt is empty: type something for the model to continue.")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if hasattr(ids, "keys"):  # BatchEncoding / dict in newer transformers
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer.encode(text)]


def new_session(key: tuple, pair: Any, cfg: DecodeConfig, prompt: str, chat: bool, notice: str = "") -> Session:
    """Build and prefill a decoder; raises SpecvizError without touching the current session."""
    settings = server_settings()
    settings.check_prompt_text(prompt)  # before tokenizing: a huge text is already work
    ids = encode_prompt(pair.tokenizer, prompt, chat)
    settings.check_prompt_ids(ids)
    dec = specviz.SpeculativeDecoder(pair, cfg)
    with decoding_slot():
        dec.start(ids)
    n = len(dec.committed)
    # The proposer's own snapshot: None for prompt lookup; a feature head marks its real-feature entries.
    prefill = (dec.target_cache.snapshot(n), dec.proposer.snapshot(n))
    return Session(key, pair, dec, tuple(ids), prefill, notices=(notice,) if notice else ())


def sync_config(sess: Session, cfg: DecodeConfig) -> None:
    """Apply changed live fields (K, temperature, top-k/p, ...) from the next cycle on."""
    cur = sess.dec.config
    if any(getattr(cur, f) != getattr(cfg, f) for f in LIVE):
        sess.dec.update_config(cur.replace(**{f: getattr(cfg, f) for f in LIVE}))


def compute_cycle(sess: Session) -> Session:
    """Run one real cycle; returns the new session showing its draft phase.

    Forced outcomes (what-if) apply to this one cycle only: `whatif.forced_step` keeps a forced
    acceptance from ending the text at an end-of-text draft, and afterwards the decoder is exact
    again. The notice says what was forced and that exact decoding resumes."""
    if sess.dec.finished:
        raise specviz.DecodingFinishedError(
            f"Generation has finished ({sess.dec.finish_reason}). Press Reset or change the prompt to start again."
        )
    forced = sess.dec.config.forced_outcomes
    try:
        with decoding_slot():
            result = whatif.forced_step(sess.dec)
    finally:
        whatif.exact_again(sess.dec)  # also when the step failed: forcing never outlives its one cycle
    whatif.exact_again(result.decoder)
    traces = (*sess.traces, result.trace)
    step = PHASES_PER_CYCLE * (len(traces) - 1) + 1
    notices = whatif.notices(result, forced) if forced else ()
    return dataclasses.replace(sess, dec=result.decoder, traces=traces, revealed=step, view=step, notices=notices)


def advance_phase(sess: Session) -> Session:
    if sess.view < sess.revealed:
        return dataclasses.replace(sess, view=sess.view + 1)
    if sess.revealed < PHASES_PER_CYCLE * len(sess.traces):
        return dataclasses.replace(sess, revealed=sess.revealed + 1, view=sess.revealed + 1)
    return compute_cycle(sess)


def advance_cycle(sess: Session) -> Session:
    """Show the end (rollback) of the current cycle, or of the next one when at a cycle end."""
    at_end = sess.view % PHASES_PER_CYCLE == 0
    target_cycle = sess.view // PHASES_PER_CYCLE if at_end else (sess.view - 1) // PHASES_PER_CYCLE
    if target_cycle >= len(sess.traces):
        sess = compute_cycle(sess)
    end = PHASES_PER_CYCLE * (target_cycle + 1)
    return dataclasses.replace(sess, view=end, revealed=max(sess.revealed, end))


# ---------------------------------------------------------------- widgets -> config -----------


def sidebar(settings: ServerSettings) -> tuple[str, str, str, str, bool, DecodeConfig, bool, Any]:
    """All controls, within this server's limits. Returns (pair kind, target, draft, prompt, chat,
    config, what-if on, proposer slot): the proposer selector needs the loaded pair, so `main` fills
    the slot afterwards and sets `config.proposer`."""
    ss = st.session_state
    lim = settings.limits
    with st.sidebar:
        st.markdown("### :material/visibility: specviz")
        if settings.classroom:
            st.info(settings.sidebar_markdown(), icon=":material/school:")
        pairs = settings.allowed_pairs(PAIR_LABELS)
        kind = st.radio("Model pair", pairs, format_func=PAIR_LABELS.get, key="pair_kind")
        target = draft = ""
        if kind == "custom":
            target = st.text_input(
                "Target (hub id or directory)", key="custom_target", placeholder="HuggingFaceTB/SmolLM2-360M-Instruct"
            )
            draft = st.text_input(
                "Draft (hub id or directory)", key="custom_draft", placeholder="HuggingFaceTB/SmolLM2-135M-Instruct"
            )
        proposer_slot = st.container()
        st.markdown("**Prompt**")
        examples = example_prompts()
        st.selectbox("Example prompts", examples, key="example", on_change=_use_example, label_visibility="collapsed")
        prompt = st.text_area("Prompt", key="prompt", height=90, max_chars=lim.prompt_chars)
        chat = st.toggle(
            "Apply the chat template",
            key="chat",
            help="Wrap the prompt as a user message with the tokenizer's chat template "
            "(when it has one). Off: the raw text is the prompt.",
        )
        st.markdown("**Sampling** — applies from the next cycle")
        k = st.slider("K (draft length)", 1, lim.k, key="k")
        temperature = st.slider("Temperature (0 = greedy)", 0.0, 2.0, step=0.05, key="temperature")
        c1, c2 = st.columns(2)
        top_k = c1.number_input("top-k (0 = off)", 0, 100000, step=1, key="top_k")
        top_p = c2.number_input("top-p (1 = off)", 0.01, 1.0, step=0.05, key="top_p")
        max_new = st.number_input("Max new tokens", 1, lim.max_new_tokens, step=16, key="max_new")
        st.markdown("**Cache** — changing these restarts")
        layout = st.radio("Cache layout", ["paged", "contiguous"], key="layout", horizontal=True)
        page = st.select_slider(
            "Page size (tokens per block)", [1, 2, 4, 8, 16, 32, 64], key="page_size", disabled=layout != "paged"
        )
        policy = st.radio(
            "Paged rollback policy",
            ["free", "keep"],
            key="policy",
            horizontal=True,
            disabled=layout != "paged",
            help="free: blocks holding only rejected positions return to the pool. "
            "keep (vLLM v1): they stay reserved and are overwritten.",
        )
        with st.expander("Pool and context limits"):
            num_blocks = st.number_input(
                "Blocks in each pool (0 = enough for the context)",
                0,
                65536,
                step=1,
                key="num_blocks",
                disabled=layout != "paged",
                help="A small pool shows what happens when the BlockPool runs out.",
            )
            max_context = st.number_input("Max context (positions)", 16, 32768, step=64, key="max_context")
        seed = st.number_input("Seed", 0, 2**31 - 1, step=1, key="seed")
        check = st.toggle(
            "Check the cache invariant every cycle",
            key="check",
            help="Compare both caches with a fresh prefill of the committed sequence (slower).",
        )
        st.markdown("**Play**")
        st.select_slider("Play speed", list(SPEEDS), key="speed")
        whatif = _whatif_controls()
    forced: tuple[tuple[int, bool], ...] = ()
    if whatif:
        forced = tuple(sorted([(i, True) for i in ss.force_accept] + [(i, False) for i in ss.force_reject]))
    settings.check_config(int(k), int(max_new))  # behind the widgets' bounds: never past a cap
    cfg = DecodeConfig(
        k=int(k),
        temperature=float(temperature),
        top_k=int(top_k),
        top_p=float(top_p),
        seed=int(seed),
        cache_layout=layout,
        page_size=int(page),
        free_policy=policy,
        max_new_tokens=int(max_new),
        check_invariant=bool(check),
        forced_outcomes=forced,
        num_blocks=int(num_blocks) if num_blocks and layout == "paged" else None,
        max_context=int(max_context),
    )
    return kind, target.strip(), draft.strip(), prompt, chat, cfg, whatif, proposer_slot


def proposer_control(pair: Any) -> str:
    """The proposer selector, for a loaded pair. It follows `preferred_proposer(pair)` until the
    user picks one; "feature" is offered only when the pair carries a feature head (and a caption
    says why it is missing otherwise). Changing it restarts, like the cache settings."""
    ss = st.session_state
    has_head = getattr(pair, "feature_head", None) is not None
    options = [name for name in PROPOSER_LABELS if name != "feature" or has_head]
    if ss.get("_proposer_auto", True) or ss.get("proposer") not in options:
        ss.proposer = preferred_proposer(pair) if preferred_proposer(pair) in options else options[0]
    st.radio(
        "Proposer — changing it restarts",
        options,
        format_func=PROPOSER_LABELS.get,
        key="proposer",
        on_change=_on_proposer_pick,
        help="Who guesses the K drafts. The target's verify, the acceptance test, the residual, the bonus "
        "and the target's rollback are the same for all three, and so is exactness.",
    )
    if not has_head:
        st.caption(
            "Feature head: unavailable — this pair carries no EAGLE-style head "
            "(`load_pair(..., feature_head=...)` attaches one)."
        )
    return ss.proposer


def _on_proposer_pick() -> None:
    st.session_state._proposer_auto = False  # the user chose: stop following the pair's preference


def _whatif_controls() -> bool:
    with st.expander(
        "What-if (teaching) mode", icon=":material/science:", expanded=st.session_state.get("whatif", False)
    ):
        st.caption(
            "Force the outcome of chosen acceptance tests in the **next cycle only**, to stage a scenario. "
            "**This breaks exactness**: forced cycles are marked in every view and left out of the statistics. "
            "After that one cycle the toggle switches itself off and decoding is exact again. Forcing stops at "
            "an end-of-text draft — from there the real test decides — so a forced acceptance never ends the text."
        )
        on = st.toggle("Force outcomes in the next cycle (breaks exactness)", key="whatif")
        positions = list(range(1, 17))
        st.multiselect("Force accept at draft positions", positions, key="force_accept", disabled=not on)
        st.multiselect("Force reject at draft positions", positions, key="force_reject", disabled=not on)
        st.button(
            "Walkthrough scenario (one cycle): K = 5, d1–d3 accepted, d4 rejected",
            key="scenario",
            on_click=_on_scenario,
            width="stretch",
        )
    return on


def _use_example() -> None:
    st.session_state.prompt = st.session_state.example


def init_state() -> None:
    env_pair = os.environ.get("SPECVIZ_PAIR", "default")
    defaults = dict(
        pair_kind=env_pair if env_pair in PAIR_LABELS else "default",
        custom_target=os.environ.get("SPECVIZ_TARGET", ""),
        custom_draft=os.environ.get("SPECVIZ_DRAFT", ""),
        prompt=DEFAULT_PROMPT,
        example=DEFAULT_PROMPT,
        chat=True,
        k=5,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new=128,
        layout="paged",
        page_size=16,
        num_blocks=0,
        max_context=2048,
        policy="free",
        seed=0,
        check=False,
        speed="normal (1 s)",
        whatif=False,
        force_accept=[],
        force_reject=[],
    )
    if env_pair == "tiny":
        defaults.update(page_size=4)  # short prompts: small pages show block traffic
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    st.session_state.setdefault("_proposer_auto", True)  # "proposer" itself is set once a pair is loaded
    holder()  # created once, on the session's first run


# ---------------------------------------------------------------- actions (callbacks) ---------


@dataclass
class Holder:
    """The browser session's one mutable cell: the current `Session` and the lock around it.

    Actions build a new immutable `Session` and assign it here in one statement. Keeping the cell
    an object, fetched *before* the slow step, matters: with `runner.fastReruns` Streamlit abandons
    a run that is still busy in the decoder, and that thread's later `st.session_state` accesses
    raise. Writing the result through the object it already holds cannot fail, so the decoder and
    the recorded history never disagree.
    """

    sess: Session | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    error: str | None = None  # the last action's error, shown until the next action
    finished_note: str | None = None  # "generation has finished", shown as a notice
    playing: bool = False
    # A forced (what-if) cycle was just computed: the next script run switches the toggle off
    # before the widget exists (a widget's value cannot be changed once it is drawn).
    whatif_spent: bool = False
    # The Session a Reset was asked for: the question shows while that very session is current, so
    # any other action (a step, a restart) withdraws it without extra bookkeeping.
    reset_asked: Session | None = None
    last_active: float = 0.0  # time.monotonic() of the session's last run (specviz.parking)
    waited_note: str | None = None  # "waited N s for a decoding slot", shown once


def holder() -> Holder:
    return st.session_state.setdefault("_holder", Holder())


def session_lock() -> threading.Lock:
    """One lock per browser session around everything that touches its decoder.

    Streamlit cannot interrupt a callback that is busy in torch code, so a click during a slow
    step could otherwise start a second script thread that runs its callback *concurrently* on the
    same decoder (with `runner.fastReruns`, off in .streamlit/config.toml). The lock makes the
    second click wait and then act on the finished state.
    """
    return holder().lock


def _act(fn: Any) -> None:
    """Run an action on the session; assign the result only if it succeeded."""
    h = holder()  # fetched before the (possibly slow) action: see Holder
    parking.shared_registry().touch(h)
    with h.lock:
        if h.sess is None:
            return
        h.waited_note = None
        try:
            woke = wake(h)  # a parked (idle) session's decoder is rebuilt first
            forcing = bool(h.sess.dec.config.forced_outcomes)  # read first: a forced cycle clears it
            new = fn(h.sess)
        except specviz.DecodingFinishedError as exc:  # not a failure: the text is complete
            h.error, h.finished_note, h.playing = None, str(exc), False
            return
        except SpecvizError as exc:
            h.error, h.playing = str(exc), False
            return
        except Exception as exc:  # keep the app usable whatever happens, but say what it was
            h.error, h.playing = f"{type(exc).__name__}: {exc}", False
            return
        if new.notices and new.notices == h.sess.notices:
            new = dataclasses.replace(new, notices=())  # a notice is shown once, until the next action
        if woke:
            new = dataclasses.replace(new, notices=(woke, *new.notices))
        if forcing and len(new.traces) > len(h.sess.traces):
            h.whatif_spent = True  # what-if forced this one cycle: switch the toggle off
        h.sess, h.error, h.finished_note = new, None, None


def park_idle(h: Holder) -> bool:
    """Release an idle session's decoder (its KV caches); the history stays (specviz.parking).
    Called by another session's sweep, under this session's lock."""
    sess = h.sess
    if sess is None or sess.dec is None or h.playing:
        return False
    new = dataclasses.replace(sess, dec=None, parked=parking.park(sess.dec))
    if h.reset_asked is sess:
        h.reset_asked = new
    h.sess = new
    return True


def wake(h: Holder) -> str | None:
    """Rebuild a parked session's decoder, exactly where it was; returns a note saying so."""
    sess = h.sess
    if sess is None or sess.parked is None:
        return None
    with decoding_slot():
        dec = parking.resume(sess.pair, sess.parked)
    new = dataclasses.replace(sess, dec=dec, parked=None)
    if h.reset_asked is sess:
        h.reset_asked = new
    h.sess = new
    idle = time.time() - sess.parked.parked_at + server_settings().idle_seconds
    idle_text = f"{idle / 60:.0f} min" if idle >= 90 else f"{idle:.0f} s"
    return (
        f"This session was idle for about {idle_text}, so its KV caches were released for other users. "
        f"They were rebuilt now from the {len(sess.parked.committed)} committed tokens: the run continues "
        "exactly where it was, and the recorded history is unchanged."
    )


def _on_next_phase() -> None:
    _act(advance_phase)


def _on_next_cycle() -> None:
    _act(advance_cycle)


def _on_back() -> None:
    _act(lambda s: dataclasses.replace(s, view=max(0, s.view - 1)))


def _on_history() -> None:
    wanted = int(st.session_state.history)  # read before the lock: see Holder
    _act(lambda s: dataclasses.replace(s, view=min(wanted, s.revealed)))


def _on_reset() -> None:
    """Reset asks first when there are recorded cycles: clearing them silently loses a lecture's run."""
    h = holder()
    h.playing = False
    if h.sess is not None and h.sess.traces:
        h.reset_asked = h.sess  # main() shows the question under the buttons
        return
    _reset_now()


def _reset_now() -> None:
    h = holder()
    h.sess = h.reset_asked = None  # rebuilt from the current controls on this run
    h.playing, h.error, h.finished_note = False, None, None
    st.session_state.reset_notice = "Reset: the decoder restarted from the prompt."


def _on_reset_cancel() -> None:
    holder().reset_asked = None


def reset_question(sess: Session) -> None:
    """'Reset clears N cycles — sure?' with a way to keep them (and to save them first)."""
    n = len(sess.traces)
    with st.container(border=True):
        st.warning(
            f"**Reset clears the {n} recorded cycle{'s' if n != 1 else ''} of this run** and restarts from the "
            "prompt. Download the traces first to keep them.",
            icon=":material/warning:",
        )
        c1, c2, c3 = st.columns(3)
        c1.button(f"Reset and clear {n} cycle{'s' if n != 1 else ''}", key="reset_confirm", on_click=_reset_now)
        c2.button("Keep the history", key="reset_cancel", on_click=_on_reset_cancel, type="primary")
        traces = list(sess.traces)
        c3.download_button(
            "Download the traces (JSON)",
            data=lambda: traces_to_json(traces),
            file_name="specviz-traces.json",
            mime="application/json",
            key="reset_download",
            on_click="ignore",
        )


def _on_play() -> None:
    h = holder()
    h.playing = not h.playing
    if h.playing:
        _on_next_phase()  # the first step happens at once; the timer does the rest


def _on_scenario() -> None:
    """One click: K = 5, force d1–d3 accept and d4 reject for ONE cycle, and run it.

    The forcing goes straight to the decoder for this cycle (`compute_cycle` clears it afterwards);
    the what-if toggle stays off, so the next cycle is exact without anyone having to remember."""
    ss = st.session_state
    ss.k, ss.whatif = 5, False
    holder().playing = False

    def run(sess: Session) -> Session:
        sess.dec.update_config(sess.dec.config.replace(k=5, forced_outcomes=WALKTHROUGH))
        done = dataclasses.replace(sess, revealed=PHASES_PER_CYCLE * len(sess.traces))
        try:
            new = compute_cycle(done)
        finally:
            whatif.exact_again(sess.dec)
        lesson = (
            "Walkthrough scenario: K = 5 with d1–d3 forced to accept and d4 to reject, for this one cycle. "
            "Step through the phases to follow the walkthrough."
        )
        return dataclasses.replace(new, notices=(lesson, *new.notices))

    _act(run)


# ---------------------------------------------------------------- views -----------------------


def token_text_fn(sess: Session) -> Any:
    return sess.dec.token_text


def status_line(sess: Session, cycle: int | None, phase: str) -> str:
    """From the recorded traces only (`narrative.status_markdown`): the finish reason shows at the
    resolve and rollback phases of the cycle that ended the text, never earlier."""
    proposer = PROPOSER_LABELS.get(sess.dec.config.proposer, sess.dec.config.proposer).split(" (")[0].lower()
    return narrative.status_markdown(len(sess.prompt_ids), sess.traces, cycle, phase, proposer)


def step_label(step: int, sess: Session) -> str:
    """A history position as people count it: 'cycle 3 · 2 · Target verifies' (cycles from 1)."""
    cycle, phase = view_of(step, sess)
    if cycle is None:
        return "prefill"
    forced = " (what-if)" if cycle < len(sess.traces) and sess.traces[cycle].forced else ""
    return f"cycle {cycle + 1}{forced} · {PHASE_TITLES.get(phase, phase)}"


def kv_view(sess: Session, cycle: int | None, phase: str) -> Any:
    if cycle is None:
        frame = kv.prefill_frame(*sess.prefill)
        return kv.kv_figure_from_frames([frame], token_text_fn(sess), "prefill", proposer=sess.dec.config.proposer)
    return kv.kv_figure(sess.traces[cycle], token_text_fn(sess), phase)


def main_view() -> None:
    """Everything below the buttons. Runs as a fragment that re-runs on a timer while playing."""
    ss = st.session_state
    h = holder()
    if h.playing and not ss.get("_full_run"):
        _on_next_phase()
        if (
            h.error
            or h.finished_note
            or (
                holder().sess.dec.finished
                and holder().sess.view == holder().sess.revealed
                and holder().sess.revealed == PHASES_PER_CYCLE * len(holder().sess.traces)
            )
        ):
            h.playing = False
            st.rerun(scope="app")
        if h.whatif_spent:
            st.rerun(scope="app")  # redraw the sidebar: the what-if toggle has switched itself off
    ss._full_run = False
    sess: Session = holder().sess
    if h.error:
        st.error(h.error, icon=":material/error:")
    if h.waited_note:
        note, h.waited_note = h.waited_note, None
        st.caption(note)
    if h.finished_note:
        st.warning(h.finished_note, icon=":material/flag:")
    cycle, phase = view_of(sess.view, sess)
    st.markdown(status_line(sess, cycle, phase))
    if sess.revealed > 0:
        ss.history = sess.view
        # Labels made now: Streamlit keeps a widget's format_func after the run, and one closing
        # over `sess` would keep its decoder (the KV caches) alive after an idle session is parked.
        labels = [step_label(step, sess) for step in range(sess.revealed + 1)]
        st.select_slider(
            "History (every revealed phase of every cycle)",
            options=list(range(sess.revealed + 1)),
            format_func=labels.__getitem__,
            key="history",
            on_change=_on_history,
        )

    chips = tokens.strip_chips(sess.prompt_ids, sess.traces, token_text_fn(sess), cycle, phase)
    st.html(tokens.strip_html(chips))

    tr = sess.traces[cycle] if cycle is not None else None
    with st.container(border=True):
        if tr is None:
            target, proposer = sess.prefill
            st.markdown(
                narrative.prefill_markdown(
                    len(sess.prompt_ids),
                    target.seq_len,
                    proposer.seq_len if proposer is not None else None,
                    sess.dec.config.proposer,
                )
            )
        else:
            st.markdown(narrative.phase_markdown(tr, phase))

    figures: dict[str, Any] = {}
    figures["kv_cache"] = kv_view(sess, cycle, phase)
    st.plotly_chart(figures["kv_cache"], key="kv_fig", theme=None, config={"displaylogo": False})

    if tr is not None and phase != "start":
        step = CYCLE_PHASES.index(phase)
        left, right = st.columns(2)
        figures["proposals"] = proposals.proposals_figure(tr)
        left.plotly_chart(figures["proposals"], key="proposals_fig", theme=None, config={"displaylogo": False})
        if step >= CYCLE_PHASES.index("verify"):
            figures["acceptance"] = acceptance.acceptance_figure(tr, tested=step >= CYCLE_PHASES.index("accept"))
            right.plotly_chart(figures["acceptance"], key="acceptance_fig", theme=None, config={"displaylogo": False})
        else:
            right.info("The target has not scored the drafts yet: acceptance appears after **verify**.")
        if step >= CYCLE_PHASES.index("verify"):
            dist_view(tr, step, figures)
    ss._figures = figures  # for tests and debugging; the export closes over `figures` itself
    extra_tabs(sess, cycle, figures)


def dist_view(tr: CycleTrace, step: int, figures: dict[str, Any]) -> None:
    left, right = st.columns(2)
    options = [d.index for d in tr.drafts]
    default = tr.rejected_at or 1
    with left:
        if not options:  # k = 0: a plain target step, there is no q to hold against p
            st.info(
                "**No proposal this cycle**, so there is no p vs q to compare: the target took one plain step "
                "and its p_1 gave the next token."
            )
        else:
            _pq_view(tr, step, options, default, figures)
    with right:
        if step >= CYCLE_PHASES.index("resolve"):
            fig = distributions.resolve_figure(tr)
            figures["resolve"] = fig
            st.plotly_chart(fig, key="resolve_fig", theme=None, config={"displaylogo": False})
        elif options:
            st.info(
                "After the tests: the **residual** norm(max(0, p_j − q_j)) at a rejection, or "
                "**p_{K+1}** for the bonus token when all K pass."
            )
        else:
            st.info("At **resolve**: the one token generated from p_1.")


def _pq_view(tr: CycleTrace, step: int, options: list[int], default: int, figures: dict[str, Any]) -> None:
    """p_i vs q_i at the draft position the segmented control picks (the rejection by default)."""
    if st.session_state.get("dist_pos") not in options:
        st.session_state.dist_pos = default
    pos = (
        st.segmented_control(
            "Compare p and q at draft position", options, key="dist_pos", format_func=lambda i: f"d{i}"
        )
        or default
    )
    figures["p_vs_q"] = distributions.pq_figure(tr, int(pos), tested=step >= CYCLE_PHASES.index("accept"))
    st.plotly_chart(figures["p_vs_q"], key="pq_fig", theme=None, config={"displaylogo": False})


def extra_tabs(sess: Session, cycle: int | None, figures: dict[str, Any]) -> None:
    t_stats, t_lab, t_myths, t_export = st.tabs(
        [
            ":material/bar_chart: Statistics",
            ":material/target: Exactness lab",
            ":material/report: Common misconceptions",
            ":material/download: Export",
        ]
    )
    with t_stats:
        stats_tab(sess)
    with t_lab:
        lab_tab(sess, cycle)
    with t_myths:
        st.markdown(
            "The classic walkthrough of the cache bookkeeping gets these wrong. specviz shows the precise version:"
        )
        st.markdown(narrative.misconceptions_markdown())
    with t_export:
        export_tab(sess, figures)


def revealed_traces(sess: Session) -> list[CycleTrace]:
    full = sess.revealed // PHASES_PER_CYCLE  # cycles whose rollback has been shown
    return list(sess.traces[:full])


def stats_tab(sess: Session) -> None:
    """Acceptance, speed and time per cycle of the revealed cycles. Forced (what-if) cycles are
    listed and marked, but every statistic leaves them out (`specviz.stats`)."""
    done = revealed_traces(sess)
    st_ = acceptance_stats(done)
    if not done:
        st.info("Statistics appear once a cycle has been stepped through to its rollback.")
    elif st_.cycles == 0:
        st.info("Every revealed cycle so far was forced (what-if): statistics count exact cycles only.")
    else:
        report = measured_speedup(done, sess.baseline_ms_per_token)
        _stats_metrics(st_, report)
        st.plotly_chart(
            statistics.stats_figure(st_, report), key="stats_fig", theme=None, config={"displaylogo": False}
        )
        st.plotly_chart(statistics.speedup_figure(report), key="speedup_fig", theme=None, config={"displaylogo": False})
        st.markdown(narrative.explain_speedup(report))
        st.caption(
            "Expected tokens per cycle (1 − α^(K+1))/(1 − α) and speedup (1 − α^(K+1))/((1 − α)(K·c + 1)) "
            "(Leviathan et al. 2023), with α measured here and c = draft time per forward / target verify "
            "time from the traces' timings. v(K) is the measured verify pass in plain decoding steps (verify ms ÷ "
            "the baseline's ms per token): the textbook's \"+ 1\" assumes it is 1. The measured speedup compares "
            "wall time per committed token with a plain autoregressive run of the same target."
            + (
                f" {st_.plain_cycles} cycle(s) proposed nothing (plain target steps): they test no draft and "
                "enter the theory by their share of the cycles."
                if st_.plain_cycles
                else ""
            )
        )
    if done:
        st.plotly_chart(
            statistics.cycle_time_figure(cycle_costs(done), sess.baseline_ms_per_token),
            key="time_fig",
            theme=None,
            config={"displaylogo": False},
        )
        if st_.forced_cycles:
            st.caption(
                f"{st_.forced_cycles} what-if cycle(s) were forced: they are listed and hatched, but left out of "
                "the acceptance rate, the histogram, the theory and the speedup."
            )
        st.markdown("**Cycle history**")
        st.dataframe(cycle_rows(done), hide_index=True, width="stretch")
    st.button("Run the autoregressive baseline (same target, same prompt)", key="baseline", on_click=_on_baseline)
    if sess.baseline_ms_per_token:
        st.caption(f"Baseline: {sess.baseline_ms_per_token:.1f} ms per token over {sess.baseline_tokens} tokens.")


def _stats_metrics(st_: Any, report: Any) -> None:
    c1, c2, c3, c4, c5 = st.columns(5)
    # α needs a tested draft: a history of plain steps only (lookup without a match) has none.
    c1.metric("Acceptance rate α", f"{st_.alpha:.3f}" if st_.tested else "—")
    c2.metric("Tokens per cycle", f"{st_.tokens_per_cycle:.2f}")
    c3.metric("Theory: E[tokens/cycle]", f"{report.expected_tokens_per_cycle:.2f}")
    c4.metric("Verify cost v(K)", f"{report.verify_cost:.2f} steps" if report.verify_cost is not None else "—")
    c5.metric("Measured speedup", f"{report.measured_speedup:.2f}×" if report.measured_speedup else "—")


def _on_baseline() -> None:
    def run(sess: Session) -> Session:
        cfg = sess.dec.config.replace(forced_outcomes=())
        ar = specviz.AutoregressiveDecoder(sess.pair.target, cfg, tokenizer=sess.pair.tokenizer)
        n = max(8, min(64, sum(len(t.emitted) for t in sess.traces)))
        steps = 0
        with decoding_slot():
            ar.start(list(sess.prompt_ids))
            t0 = time.perf_counter()
            for _ in range(n):
                if getattr(ar, "finished", False):
                    break
                ar.step()
                steps += 1
            ms = (time.perf_counter() - t0) * 1000 / max(steps, 1)
        return dataclasses.replace(sess, baseline_ms_per_token=ms, baseline_tokens=steps)

    _act(run)


def lab_tab(sess: Session, cycle: int | None) -> None:
    st.markdown(
        "Sample **N** next tokens with the speculative decoder and **N** with the target alone, from "
        "the context at the start of the cycle shown, and compare both with the exact p. Exactness "
        "means the speculative sampler's TV distance to p shrinks like 1/√N, exactly like the target's."
    )
    c1, c2 = st.columns([1, 3])
    cap = server_settings().limits.lab_n
    n = c1.number_input(
        "N samples",
        min(10, cap),
        cap,
        value=min(60, cap),
        step=10,
        key="lab_n",
        help="Each sample runs a fresh decoder from the context (both models prefill it), so on a "
        "2-core CPU the default pair takes about a second per speculative + target-only pair.",
    )
    if c2.button("Run the exactness lab", key="lab_run"):
        ctx = list(sess.prompt_ids) + [e.token_id for t in sess.traces[: (cycle or 0)] for e in t.emitted]
        bar = st.progress(0.0, text="sampling…")
        try:
            server_settings().check_lab_n(int(n))
            with decoding_slot():
                res = run_exactness_lab(
                    sess.pair, ctx, sess.dec.config, int(n), progress=lambda f, msg: bar.progress(min(f, 1.0), text=msg)
                )
        except SpecvizError as exc:
            st.error(str(exc))
        else:
            with session_lock():
                holder().sess = dataclasses.replace(holder().sess, lab=res)
            sess = holder().sess
        bar.empty()
    if sess.lab is not None:
        res = sess.lab
        st.plotly_chart(exactness.lab_figure(res), key="lab_fig", theme=None, config={"displaylogo": False})
        st.caption(f"TV at N = {res.n}: speculative {res.tv_spec[-1]:.3f}, target only {res.tv_target[-1]:.3f}.")


def export_tab(sess: Session, figures: dict[str, Any]) -> None:
    # The data callables run only when a button is clicked, possibly outside this script run:
    # they close over plain values and never touch st.session_state.
    traces = list(sess.traces)
    st.download_button(
        "Traces (JSON)",
        data=lambda: traces_to_json(traces),
        file_name="specviz-traces.json",
        mime="application/json",
        key="dl_json",
        on_click="ignore",  # downloading changes nothing: no rerun
        disabled=not sess.traces,
    )
    st.download_button(
        "Current figures (standalone HTML)",
        data=lambda: figures_html(figures),
        file_name="specviz-figures.html",
        mime="text/html",
        key="dl_html",
        on_click="ignore",  # downloading changes nothing: no rerun
    )
    st.caption("The HTML file embeds plotly.js and every frame of the KV animation: it works offline.")


def figures_html(figs: dict[str, Any]) -> str:
    """The figures on screen as one standalone HTML page (plotly.js embedded once, frames kept)."""
    parts = [
        "<html><head><meta charset='utf-8'><title>specviz figures</title></head>"
        "<body style='font-family:sans-serif;max-width:1200px;margin:auto'>"
    ]
    for i, (name, fig) in enumerate(figs.items()):
        parts.append(f"<h3>{name}</h3>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), auto_play=False))
    parts.append("</body></html>")
    return "".join(parts)


# ---------------------------------------------------------------- page ------------------------


def button_row(sess: Session | None) -> None:
    cols = st.columns([1.5, 1.7, 1.1, 1.2, 1.1, 1.5])
    disabled = sess is None
    # Material icons ship with Streamlit's frontend (no emoji font needed on the viewer's machine).
    cols[0].button(
        "Next phase",
        key="next_phase",
        on_click=_on_next_phase,
        type="primary",
        disabled=disabled,
        icon=":material/play_arrow:",
        shortcut="Right",
        width="stretch",
    )
    cols[1].button(
        "Next cycle",
        key="next_cycle",
        on_click=_on_next_cycle,
        disabled=disabled,
        icon=":material/skip_next:",
        shortcut="Shift+Right",
        width="stretch",
    )
    cols[2].button(
        "Back",
        key="back",
        on_click=_on_back,
        disabled=disabled or sess.view == 0,
        icon=":material/undo:",
        shortcut="Left",
        width="stretch",
    )
    cols[3].button(
        "Pause" if holder().playing else "Play",
        key="play",
        on_click=_on_play,
        disabled=disabled,
        icon=":material/pause:" if holder().playing else ":material/slow_motion_video:",
        shortcut="P",
        width="stretch",
        help="Auto-advance one phase at a time at the sidebar's speed",
    )
    cols[4].button("Reset", key="reset", on_click=_on_reset, icon=":material/restart_alt:", width="stretch")


def main() -> None:
    try:
        settings = server_settings()
    except SpecvizError as exc:  # a typo in a server setting must not open a locked-down server
        st.error(f"This server's specviz settings are invalid: {exc}", icon=":material/error:")
        return
    configure_threads(settings)
    init_state()
    ss = st.session_state
    registry = parking.shared_registry()
    registry.touch(holder())
    registry.sweep(settings.idle_seconds, park_idle)  # other sessions idle for too long free their caches
    if holder().whatif_spent:  # before the toggle is drawn: its value can only change now
        ss.whatif, holder().whatif_spent = False, False
    limit_notes = apply_limits(settings)
    kind, target, draft, prompt, chat, cfg, _, proposer_slot = _safe_sidebar(settings)
    st.markdown("## Speculative decoding, exactly — step by step")
    st.caption(
        "A **proposer** — a small draft model, a feature head reading the target's hidden states, or prompt "
        "lookup — guesses K tokens, the **target** model checks them all in one forward pass, and a "
        "rejection-sampling test keeps the output distributed exactly as the target's. Watch the KV caches "
        "grow provisionally and roll back."
    )
    for note in limit_notes:
        st.warning(note, icon=":material/school:")
    if cfg is None:
        button_row(None)
        return
    try:
        settings.check_pair(kind)  # behind the radio's options: a custom pair never loads here
    except SpecvizError as exc:
        st.error(str(exc), icon=":material/error:")
        button_row(None)
        return
    if kind == "custom" and not (target and draft):
        st.info("Enter a target and a draft (hub ids or local directories) in the sidebar.")
        button_row(None)
        return
    pair = _load_pair(kind, target, draft)
    if pair is None:
        button_row(None)
        return
    with proposer_slot:
        cfg = cfg.replace(proposer=proposer_control(pair))
    restart_key = (
        kind,
        target,
        draft,
        cfg.proposer,
        prompt,
        chat,
        cfg.cache_layout,
        cfg.page_size,
        cfg.free_policy,
        cfg.seed,
        cfg.num_blocks,
        cfg.max_context,
    )
    with session_lock():
        if not _ensure_session(ss, restart_key, pair, cfg, prompt, chat):
            button_row(None)
            return
    sess = holder().sess
    for note in sess.notices:
        st.info(note, icon=":material/info:")
    button_row(sess)
    if holder().reset_asked is sess:
        reset_question(sess)
    ss._full_run = True
    run_every = SPEEDS.get(ss.speed, 1.0) if holder().playing else None
    st.fragment(run_every=run_every)(main_view)()


def _ensure_session(ss: Any, restart_key: tuple, pair: Any, cfg: DecodeConfig, prompt: str, chat: bool) -> bool:
    """(Re)start the session's decoder when a restart setting changed; apply live settings."""
    sess: Session | None = holder().sess
    if sess is None or sess.restart_key != restart_key:
        notice = ss.pop("reset_notice", "")
        if sess is not None:
            changed = [
                name
                for name, a, b in zip(
                    (
                        "model pair",
                        "target",
                        "draft",
                        "proposer",
                        "prompt",
                        "chat template",
                        "cache layout",
                        "page size",
                        "rollback policy",
                        "seed",
                        "pool size",
                        "max context",
                    ),
                    sess.restart_key,
                    restart_key,
                    strict=True,
                )
                if a != b
            ]
            notice = f"Restarted from the prompt because the {', '.join(changed)} changed (history cleared)."
        try:
            holder().sess = new_session(restart_key, pair, cfg, prompt, chat, notice)
            holder().error = None
        except SpecvizError as exc:
            holder().sess = None
            holder().playing = False
            st.error(f"Could not start: {exc}", icon=":material/error:")
            return False
    elif holder().sess.parked is not None:  # idle for a while: rebuild the released decoder
        try:
            note = wake(holder())
        except SpecvizError as exc:  # e.g. the server stayed busy: the history is still there
            st.error(f"Could not resume: {exc}", icon=":material/error:")
            return False
        h = holder()
        new = dataclasses.replace(h.sess, notices=(note, *h.sess.notices))
        h.reset_asked = new if h.reset_asked is h.sess else h.reset_asked
        h.sess = new
    try:
        sync_config(holder().sess, cfg)
    except SpecvizError as exc:
        holder().error = str(exc)
    return True


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
    keys = {"k": ("k", "K"), "max_new_tokens": ("max_new", "Max new tokens"), "lab_n": ("lab_n", "The lab's N")}
    current = {name: int(ss.get(key, 0) or 0) for name, (key, _) in keys.items()}
    for name, cap in settings.clamp(current).items():
        key, label = keys[name]
        ss[key] = cap
        notes.append(f"{label} lowered from {current[name]} to {cap}: the limit on this classroom server.")
    return notes


def _safe_sidebar(settings: ServerSettings) -> tuple:
    try:
        return sidebar(settings)
    except SpecvizError as exc:  # e.g. an invalid DecodeConfig
        st.error(str(exc), icon=":material/error:")
        return ("", "", "", "", False, None, False, None)


def _load_pair(kind: str, target: str, draft: str) -> Any:
    bar = st.empty()

    def progress(msg: str, fraction: float | None = None) -> None:
        bar.progress(min(max(fraction or 0.0, 0.0), 1.0), text=f"Loading models: {msg}")

    try:
        pair = load_pair_cached(kind, target, draft, progress=progress)
    except SpecvizError as exc:
        bar.empty()
        st.error(f"Could not load the model pair: {exc}", icon=":material/error:")
        st.caption("Pick another pair in the sidebar (the tiny random pair always works).")
        return None
    except Exception as exc:  # unexpected loader failure: report, stay usable
        bar.empty()
        st.error(f"Could not load the model pair ({type(exc).__name__}): {exc}", icon=":material/error:")
        return None
    bar.empty()
    return pair


if __name__ == "__main__":  # streamlit runs the script as __main__; importing it (tests) runs nothing
    main()
