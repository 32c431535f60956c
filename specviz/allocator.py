"""A cycle's short-lived tensors stay in the C heap: glibc malloc's two thresholds, pinned.

Each cycle allocates and frees a few MB of tensors (the target's logits [N+1, V] in float32, a
tree's draft distributions). glibc maps a block above its *mmap threshold* afresh, and hands the
heap's free top back to the OS above its *trim threshold*. Both start at 128 KiB and rise only when
a larger mapped block is freed, so where they sit depends on the process's history (how long the
first prompt was). Where they sit low, every cycle gets new pages that the kernel zero-fills on
first touch: ~300 page faults and ~1 ms per 16-node bfloat16 tree cycle (docs/benchmarks.md).
Pinned (32 MiB, the largest mmap threshold glibc accepts, and twice that for trimming), every cycle
reuses the same memory. Other C libraries have no `mallopt`: nothing to do. Nor where the
process's owner set glibc's own variables (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, ...):
their choice stands.
"""

from __future__ import annotations

import ctypes
import functools
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
OWNER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


@functools.cache
def pin_malloc_thresholds() -> bool:
    """Pin both thresholds, once per process; False where the C library has no glibc `mallopt`, or
    where the environment already tunes glibc's malloc (`OWNER_SETTINGS`: left as set)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None or any(os.environ.get(name) for name in OWNER_SETTINGS):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
