"""Server settings: one specviz process serving many browser sessions (README, "A shared server";
docs/design.md §3). No Streamlit import: the app reads them on every script run.

**Classroom lockdown** (off by default): only the built-in pairs (no hub id or local path reaches
`load_pair`), caps on the prompt, `max_new_tokens`, K, the tree's width and node budget and the
lab's N, one precision (each precision is another copy of the pair in memory), run files opened per
page, pages open at once (in all and per browser address). **Sharing the machine**:
`max_decoding` (`specviz.gate`), `busy_timeout`, `idle_seconds` (`specviz.parking`), torch's threads.
`SPECVIZ_<FIELD>` variables win over the `[specviz]` table of `$SPECVIZ_SETTINGS` (else
`.streamlit/specviz.toml`), over the defaults below. A value that cannot be parsed is a
`ConfigError`: a typo must not quietly open a server that was meant to be locked down.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .config import MAX_TREE_NODES, MAX_TREE_WIDTH
from .errors import ConfigError, PromptError
from .precision import DEFAULT_DTYPE, DTYPES

SETTINGS_ENV = "SPECVIZ_SETTINGS"
SETTINGS_FILE = Path(".streamlit") / "specviz.toml"
TABLE = "specviz"
CLASSROOM_PAIRS = ("default", "tiny")  # built in, read-only, bounded in size


@dataclass(frozen=True)
class Limits:
    """Upper bounds of the user's inputs (None: no bound beyond the widget's own)."""

    k: int
    max_new_tokens: int
    lab_n: int
    prompt_chars: int | None
    prompt_tokens: int | None
    tree_width: int = MAX_TREE_WIDTH
    tree_nodes: int = MAX_TREE_NODES
    dtypes: tuple[str, ...] = DTYPES  # precisions offered (each is another copy of the pair)
    uploads: int | None = None  # run files one page may open
    sessions: int | None = None  # pages open at once, in all ...
    sessions_per_client: int | None = None  # ... and from one browser address


# The app's own widget bounds on a personal machine.
PERSONAL = Limits(k=16, max_new_tokens=4096, lab_n=2000, prompt_chars=None, prompt_tokens=None)


def _cores() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ServerSettings:
    classroom: bool = False
    max_prompt_chars: int = 2000
    max_prompt_tokens: int = 256
    max_new_tokens: int = 256
    max_k: int = 8
    max_lab_n: int = 200
    max_tree_width: int = 4  # a 4-wide tree of 32 nodes verifies 33 positions in one pass
    max_tree_nodes: int = 32
    allow_bfloat16: bool = False  # a second precision loads a second copy of each pair
    max_uploads: int = 10  # run files opened per page
    max_sessions: int = 100  # pages open at once (each holds a decoder and its caches)
    max_sessions_per_client: int = 40  # from one address: a class behind one NAT shares one
    restore_sessions: int = 64  # pages whose runs a reload brings back (the least recently active dropped)
    max_decoding: int = dataclasses.field(default_factory=_cores)
    busy_timeout: float = 120.0  # seconds a step waits for a decoding slot before "try again"
    idle_seconds: float = 900.0  # release an idle session's caches after this long (0 = never)
    threads: int | None = None  # torch threads; None = threads_per_step()
    source: str = "defaults"  # where the values came from, for messages

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, path: str | Path | None = None) -> ServerSettings:
        """Defaults, then the settings file's `[specviz]` table, then `SPECVIZ_*` variables."""
        env = os.environ if env is None else env
        file = Path(path) if path is not None else Path(env.get(SETTINGS_ENV) or SETTINGS_FILE)
        values: dict[str, object] = {}
        sources = []
        if file.is_file():
            try:
                table = tomllib.loads(file.read_text()).get(TABLE, {})
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read the server settings file {file}: {exc}") from exc
            if not isinstance(table, dict):
                raise ConfigError(f"{file}: [{TABLE}] must be a table")
            if unknown := sorted(set(table) - set(_FIELDS)):
                raise ConfigError(f"{file}: unknown [{TABLE}] setting(s) {unknown}; known: {sorted(_FIELDS)}")
            values.update({name: _parse(name, value, str(file)) for name, value in table.items()})
            sources.append(str(file))
        from_env = [name for name in _FIELDS if env.get(_env_name(name), "").strip()]
        values.update({name: _parse(name, env[_env_name(name)].strip(), _env_name(name)) for name in from_env})
        if from_env:
            sources.append("environment (" + ", ".join(_env_name(n) for n in from_env) + ")")
        return cls(**values, source=" + ".join(sources) or "defaults")

    @property
    def limits(self) -> Limits:
        if not self.classroom:
            return PERSONAL
        return Limits(k=min(PERSONAL.k, self.max_k), max_new_tokens=min(PERSONAL.max_new_tokens, self.max_new_tokens),
                      lab_n=min(PERSONAL.lab_n, self.max_lab_n), prompt_chars=self.max_prompt_chars,
                      prompt_tokens=self.max_prompt_tokens, tree_width=min(MAX_TREE_WIDTH, self.max_tree_width),
                      tree_nodes=min(MAX_TREE_NODES, self.max_tree_nodes),
                      dtypes=DTYPES if self.allow_bfloat16 else (DEFAULT_DTYPE,), uploads=self.max_uploads,
                      sessions=self.max_sessions, sessions_per_client=self.max_sessions_per_client)

    def allowed_pairs(self, kinds: Iterable[str]) -> list[str]:
        return [k for k in kinds if not self.classroom or k in CLASSROOM_PAIRS]

    def check_pair(self, kind: str) -> None:
        if self.classroom and kind not in CLASSROOM_PAIRS:
            raise ConfigError("Custom model pairs (hub ids and local paths) are disabled on this classroom server: "
                              "use the default pair or the tiny random pair.")

    def check_prompt_text(self, text: str) -> None:
        """Before tokenizing: tokenizing a huge text is already work for the server."""
        _check_prompt(len(text), self.limits.prompt_chars, f"The prompt has {len(text):,} characters")

    def check_prompt_ids(self, ids: list[int]) -> None:
        size = f"The prompt is {len(ids):,} tokens long (with the chat template, if on)"
        _check_prompt(len(ids), self.limits.prompt_tokens, size)

    def check_config(self, k: int, max_new_tokens: int, tree_width: int = 1, tree_nodes: int = 1,
                     dtype: str = DEFAULT_DTYPE) -> None:
        """Defense in depth behind the widgets' bounds: a value past a cap never reaches a decoder."""
        lim = self.limits
        _check_cap(f"K = {k}", k, lim.k)
        _check_cap(f"Max new tokens = {max_new_tokens}", max_new_tokens, lim.max_new_tokens)
        _check_cap(f"Tree width = {tree_width}", tree_width, lim.tree_width)
        _check_cap(f"Tree nodes = {tree_nodes}", tree_nodes, lim.tree_nodes)
        if dtype not in lim.dtypes:
            raise ConfigError(f"Precision {dtype} is off on this classroom server (each precision is another copy of "
                              f"the models in memory): use {', '.join(lim.dtypes)}.")

    def check_upload(self, opened: int) -> None:
        """Before a page opens one more run file (`opened` so far)."""
        if self.limits.uploads is not None and opened >= self.limits.uploads:
            raise ConfigError(f"This page has opened {opened} run files, the most this classroom server allows "
                              f"({self.limits.uploads}): reload the page to open more.")

    def check_lab_n(self, n: int) -> None:
        _check_cap(f"N = {n}", n, self.limits.lab_n, " samples")

    def clamp(self, values: Mapping[str, int]) -> dict[str, int]:
        """Of {"k", "max_new_tokens", "lab_n", "tree_width", "tree_nodes"} values, those above the limits,
        lowered to them."""
        lim = self.limits
        caps = {"k": lim.k, "max_new_tokens": lim.max_new_tokens, "lab_n": lim.lab_n, "tree_width": lim.tree_width,
                "tree_nodes": lim.tree_nodes}
        return {name: caps[name] for name, value in values.items() if name in caps and value > caps[name]}

    def sidebar_markdown(self) -> str:
        """What a student sees: which limits hold here and why."""
        lim = self.limits
        return ("**Classroom server.** Custom model pairs and local paths are disabled (only the default pair and "
                f"the tiny random pair); prompts up to {lim.prompt_chars:,} characters and {lim.prompt_tokens:,} "
                f"tokens; at most {lim.max_new_tokens:,} new tokens, K ≤ {lim.k}, tree width ≤ {lim.tree_width} and "
                f"≤ {lim.tree_nodes} nodes, exactness lab N ≤ {lim.lab_n:,}, precision {' or '.join(lim.dtypes)}, "
                f"{lim.uploads} run files per page. At most {self.max_decoding} session(s) decode at once; the "
                "others wait their turn.")

    def threads_per_step(self, cores: int | None = None) -> int:
        """Torch threads for each decoding step: the cores shared among the decoding slots."""
        if self.threads is not None:
            return self.threads
        return plan_threads(cores or _cores(), self.max_decoding)


def _check_cap(said: str, value: int, cap: int, unit: str = "") -> None:
    if value > cap:
        raise ConfigError(f"{said} is above this server's limit of {cap}{unit}.")


def _check_prompt(size: int, cap: int | None, said: str) -> None:
    if cap is not None and size > cap:
        raise PromptError(f"{said}; this classroom server accepts at most {cap:,}. Shorten it to continue.")


def plan_threads(cores: int, max_decoding: int) -> int:
    """Intra-op threads so that `max_decoding` concurrent steps fill, and do not oversubscribe,
    `cores`; 1 on machines with <= 2 cores (OpenMP busy-waiting under load, bench/threads.py)."""
    if cores <= 2:
        return 1
    return max(1, cores // max(1, max_decoding))


# ---------------------------------------------------------------- parsing ----------------------

_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
# Each setting's kind, from its field's type: on/off, seconds, or a positive integer.
_FIELDS = {f.name: {"bool": "bool", "float": "seconds"}.get(f.type, "posint")
           for f in dataclasses.fields(ServerSettings) if f.name != "source"}


def _env_name(field_name: str) -> str:
    return "SPECVIZ_" + field_name.upper()


def _parse(name: str, value: object, where: str) -> object:
    kind = _FIELDS[name]
    text = str(value).strip().lower()
    if kind == "bool":
        if text in _BOOL:  # a TOML boolean too: str(True) is "True"
            return _BOOL[text]
        raise ConfigError(f"{where}: {name} must be on or off (1/0, true/false), got {value!r}")
    try:
        number = float(text) if kind == "seconds" else int(text)
    except ValueError:
        number = None
    bad = number is None or not math.isfinite(number) or number < (1 if kind == "posint" else 0)
    if isinstance(value, bool) or bad:
        wanted = "a positive integer" if kind == "posint" else "a number of seconds >= 0"
        raise ConfigError(f"{where}: {name} must be {wanted}, got {value!r}")
    return number
