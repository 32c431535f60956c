"""The words of the KV view (viz/kv_html.py) for each cache and for what happened to it.

Every surface that describes a cache (the stage, the standalone page, a test) takes its titles and
sentences from here: the proposer's cache heading from the proposer table (docs/design.md §1b),
one phase's events as one line, a cache's memory. Plain text and inline HTML only.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from ..proposers import registry
from ..trace import CacheEvent, CacheSnapshot


def panel_title(proposer: str) -> str:
    """The heading of `proposer`'s cache panel (ConfigError for a proposer without a cache)."""
    title = registry.get(proposer).cache_title
    if title is None:
        raise ConfigError(f"proposer {proposer!r} keeps no cache: it has no cache panel")
    return title


def no_cache_html(proposer: str) -> str:
    """What stands where the proposer's cache would be, for a proposer that keeps none."""
    words = registry.get(proposer).words
    return (f"<strong>{registry.cap(words.noun)} keeps no draft cache</strong> <span>{words.copies}: no model runs, "
            "nothing to write or roll back</span>")


def memory_text(snap: CacheSnapshot) -> str:
    """KV memory of one cache: allocated (storage that exists), held (what the sequence owns:
    the buffer, or its blocks incl. stale slots) and valid (positions ever read); '' if the
    snapshot predates memory recording."""
    if not snap.bytes_per_slot:
        return ""
    mib = 1024 * 1024
    return (f"KV {snap.allocated_bytes / mib:.2f} MiB allocated · {snap.held_bytes / mib:.2f} held · "
            f"{snap.valid_bytes / mib:.2f} valid")


def events_text(events: Sequence[CacheEvent], phase: str, committed: int | None = None) -> str:
    """The phase's cache events in one line ("no change" if none). The draft appends one position
    per forward pass, so consecutive appends are merged into one range, and block allocations
    into one list. With `committed` (the snapshot's committed length), an append that lies wholly
    inside it says "committed": a plain target step writes x_n's K/V, which nothing can take back."""
    here = [e for e in events if e.phase == phase]
    if not here:
        return "no change"
    parts: list[str] = []
    if appends := [e for e in here if e.kind == "append"]:
        runs: list[list[CacheEvent]] = []
        for e in appends:
            if runs and runs[-1][-1].end == e.start:
                runs[-1].append(e)
            else:
                runs.append([e])
        for run in runs:
            passes = f", {len(run)} forward passes" if len(run) > 1 else ""
            state = "committed" if committed is not None and run[-1].end <= committed else "provisional"
            parts.append(f"append K/V for positions {run[0].start}..{run[-1].end - 1} ({state}{passes})")
    if allocated := [b for e in here if e.kind == "alloc" for b in e.blocks]:
        parts.append(f"allocate block(s) {allocated} from the free pool")
    parts += [e.describe() for e in here if e.kind not in ("append", "alloc")]
    return "; ".join(parts)
