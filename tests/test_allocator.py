"""glibc's malloc thresholds, pinned (`specviz.allocator`): a cycle's transients reuse the same pages.

Each case runs in a fresh interpreter, whose thresholds start where glibc starts them. One freed
4 MiB block raises them (mmap 4 MiB, trim 8 MiB); then a "cycle" allocates, touches and frees three
3.5 MiB blocks: 10.5 MiB of free heap top, over the trim threshold, so glibc returns it to the OS and
the next cycle faults every page in again, unless the thresholds are pinned.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.allocator import pin_malloc_thresholds

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

CYCLES = 20
PAGES_PER_CYCLE = 3 * (7 << 19) // 4096

SCRIPT = f"""
import resource, sys, torch
from specviz.allocator import pin_malloc_thresholds
if sys.argv[1] == "pinned":
    assert pin_malloc_thresholds()
torch.empty(4 << 20, dtype=torch.uint8).fill_(1)
def cycle():
    blocks = [torch.empty(7 << 19, dtype=torch.uint8).fill_(1) for _ in range(3)]
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({CYCLES}):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=Path(__file__).parent.parent,
                          capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout.split()[-1])


def test_pinned_thresholds_keep_a_cycles_pages():
    default, pinned = page_faults("default"), page_faults("pinned")
    assert default > CYCLES * PAGES_PER_CYCLE // 2  # glibc's own thresholds: the pages come back each cycle
    assert pinned < CYCLES * PAGES_PER_CYCLE // 20  # pinned: the first cycle's pages are reused


def test_pinning_is_done_once_and_reports_success():
    assert pin_malloc_thresholds() is True
    assert pin_malloc_thresholds() is True
    assert pin_malloc_thresholds.cache_info().misses == 1  # mallopt was called once in this process
