"""Cost bounded by what is drawn (issue 33 part 4): a run file's claimed sizes never size the work.

The schema (specviz/run_schema.py) refuses a position past the run's own tokens and any size past
MAX_POSITIONS; within those caps a snapshot may still claim a pool of 131,072 blocks of 1,024 slots.
The KV picture draws from what the snapshot *lists* (its slots, its block table) and the window it
shows (viz/kv_html.py `_Cells`, HOT_ROWS_MAX, OVERVIEW_MAX): the standalone page of such a file draws
as many cells as the honest run's, and its overview at most OVERVIEW_MAX cells per cache.
"""

from __future__ import annotations

import json
import re

from hostile_runs import tiny_record

from specviz.run_schema import MAX_POSITIONS
from specviz.runfile import load_run
from specviz.viz.kv_html import HOT_ROWS_MAX, MAX_ROWS, OVERVIEW_MAX
from specviz.viz.standalone import run_html


def _snapshots(data: dict):
    yield from (s for s in data["prefill"] if s is not None)
    for trace in data["traces"]:
        for phase in trace["snapshots"]:
            yield from (s for s in (phase["target"], phase["draft"]) if s is not None)


def _claiming_the_cap(data: dict) -> dict:
    """Every snapshot claims the largest pool the caps allow: a block id at MAX_POSITIONS in its
    table, capacity and pool at the cap (its slots listed as before)."""
    data = json.loads(json.dumps(data))
    for snap in _snapshots(data):
        snap.update(block_table=[*snap["block_table"], MAX_POSITIONS], capacity=MAX_POSITIONS,
                    max_capacity=MAX_POSITIONS, num_blocks=MAX_POSITIONS)  # fmt: skip
    return data


def _cells(page: str) -> int:
    return len(re.findall(r"class='svkv-cell svkv-s-", page))


def test_a_snapshot_claiming_the_largest_pool_draws_no_more_than_the_honest_run():
    honest = tiny_record()
    claimed = load_run(json.dumps(_claiming_the_cap(honest.to_dict())))  # within the caps: it loads
    assert max(claimed.traces[0].snapshot("verify").target.block_table) == MAX_POSITIONS
    page, honest_page = run_html(claimed), run_html(honest)
    steps = 1 + 5 * len(honest.traces)
    width = honest.config.page_size
    # The claimed block's row is drawn (it is in the table), every other claimed row is summarised.
    assert _cells(page) <= _cells(honest_page) + 2 * steps * width
    assert _cells(page) <= 2 * steps * (MAX_ROWS + HOT_ROWS_MAX) * width
    overview = re.findall(r"<div class='svkv-ov'.*?</div>", page)
    assert overview and all(o.count("svkv-ovc") <= OVERVIEW_MAX for o in overview)
    assert len(page) < 20 * len(honest_page)
