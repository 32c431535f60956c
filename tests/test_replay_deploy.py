"""A replay-only deployment needs no model: a recorded run -- the app's run file (Export tab), or
the older list of traces that `python -m specviz walk --json` writes -- becomes the standalone run
page (`specviz.viz.standalone.run_html`: every phase of every cycle, its KV picture and narrative,
stepped with its own Next/Back buttons) in a process where building any model is made impossible.
Such pages can be served to any number of students by any static web server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from specviz.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent

REPLAY = r"""
import sys, torch, transformers, specviz, specviz.models, specviz.tiny
from specviz.runfile import load_run
from specviz.viz.standalone import run_html

def no_model(*args, **kwargs):
    raise RuntimeError("a replay must not build or load a model")

# Everything is imported; from here on no model of any kind can be constructed or loaded.
transformers.PreTrainedModel.from_pretrained = classmethod(no_model)
specviz.load_pair = specviz.models.load_pair = no_model
specviz.load_default_pair = specviz.models.load_default_pair = no_model
specviz.build_tiny_pair = specviz.tiny.build_tiny_pair = no_model
torch.nn.Module.__init__ = no_model  # last: transformers builds modules while it imports lazily
try:
    torch.nn.Linear(2, 2)
except RuntimeError:
    pass
else:
    sys.exit("the guard against building models is not active")

for source, page in zip(sys.argv[1::2], sys.argv[2::2]):
    record = load_run(open(source, "rb").read())
    open(page, "w").write(run_html(record))
    print(len(record.traces))
"""


def _run_file(path: Path) -> Path:
    """A run file as the app's Export tab writes it (`specviz.ui.runs.record_of`), from a
    live tiny run with the feature head (its cache holds entries, not tokens)."""
    import specviz
    from specviz.ui.runs import record_of
    from specviz.ui.state import advance_cycle, start_live_run

    pair = specviz.build_tiny_pair(seed=0)
    cfg = specviz.DecodeConfig(k=3, page_size=4, proposer="feature", seed=1)
    run = start_live_run(1, "deploy", (), pair, cfg, pair.tokenizer.encode("Hello there, world"))
    for _ in range(2):
        run = advance_cycle(run)
    path.write_text(record_of(run).to_json())
    return path


def test_recorded_runs_become_standalone_pages_without_any_model(tmp_path):
    traces = tmp_path / "traces.json"
    assert cli_main(["walk", "--tiny", "--cycles", "3", "--k", "3", "--json", str(traces)]) == 0
    assert len(json.loads(traces.read_text())) == 3
    run_file = _run_file(tmp_path / "run.json")
    pages = [tmp_path / "from-traces.html", tmp_path / "from-run-file.html"]
    args = [str(traces), str(pages[0]), str(run_file), str(pages[1])]
    done = subprocess.run([sys.executable, "-c", REPLAY, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                                                       "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(map(int, done.stdout.split()[-2:])) == [3, 2]
    for page, cycles in zip(pages, (3, 2), strict=True):
        html = page.read_text()
        steps = re.findall(r"<section class='step' data-title='([^']*)'>", html)
        assert len(steps) == 1 + 5 * cycles  # the prefill, then draft … rollback of every cycle
        assert steps[0] == "prefill" and steps[-1] == f"cycle {cycles} · rollback"
        # One KV picture per step (the page opens in the lecture layout: its pictures are the lecture ones).
        assert len(re.findall(r"<div class='svkv[ '][^>]*role='figure'", html)) == len(steps)
        assert "id='back'" in html and "id='next'" in html and "ArrowRight" in html  # its own Next/Back
        assert "<script src=" not in html and "<link" not in html  # nothing external: works offline
        assert "Cycle 1 · 2 · Target verifies" in html
    assert "Feature head cache" in pages[1].read_text()
