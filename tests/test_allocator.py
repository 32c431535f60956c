"""glibc's malloc thresholds, pinned (`specviz.allocator`): a cycle's transients reuse the same pages.

Each case runs in a fresh interpreter, where a "cycle" allocates, touches and frees three 3.5 MiB
blocks. Where glibc's dynamic thresholds settle depends on what the process did first (here, what
importing torch allocated: it varies from run to run with hash randomization), so the control sets
them to glibc's start values (128 KiB) itself: each block is then mapped afresh, or the freed heap
top handed back, and every cycle faults its pages in again. Pinned, the first cycle's pages are reused.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.allocator import OWNER_SETTINGS, pin_malloc_thresholds

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

CYCLES = 20
PAGES_PER_CYCLE = 3 * (7 << 19) // 4096

SCRIPT = f"""
import ctypes, resource, sys, torch
from specviz.allocator import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, pin_malloc_thresholds
if sys.argv[1] == "low":  # glibc's start values, whatever the import did to them
    libc = ctypes.CDLL(None)
    assert libc.mallopt(M_MMAP_THRESHOLD, 128 << 10) and libc.mallopt(M_TRIM_THRESHOLD, 128 << 10)
if sys.argv[1] == "pinned":
    assert pin_malloc_thresholds()
if sys.argv[1] == "owner":
    assert not pin_malloc_thresholds()
def cycle():
    blocks = [torch.empty(7 << 19, dtype=torch.uint8).fill_(1) for _ in range(3)]
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({CYCLES}):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in OWNER_SETTINGS}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=Path(__file__).parent.parent, env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout.split()[-1])


def test_pinned_thresholds_keep_a_cycles_pages():
    low, pinned = page_faults("low"), page_faults("pinned")
    assert low > CYCLES * PAGES_PER_CYCLE // 2  # glibc's start thresholds: the pages come back each cycle
    assert pinned < CYCLES * PAGES_PER_CYCLE // 20  # pinned: the first cycle's pages are reused


def test_pinning_is_done_once_and_reports_success():
    assert pin_malloc_thresholds() is True
    assert pin_malloc_thresholds() is True
    assert pin_malloc_thresholds.cache_info().misses == 1  # mallopt was called once in this process


def test_thresholds_the_environment_sets_are_left_as_set():
    """glibc's own variable (here the trim threshold at glibc's start value): the owner chose, specviz
    stands aside, and the pages come back each cycle as they would without specviz."""
    assert page_faults("owner", MALLOC_TRIM_THRESHOLD_=str(128 << 10)) > CYCLES * PAGES_PER_CYCLE // 2
