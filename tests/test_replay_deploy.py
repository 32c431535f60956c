"""A replay-only deployment needs no model: recorded traces (JSON, as the app's export and
`python -m specviz walk --json` write them) become the app's figures and its standalone HTML page
in a process where building any model is made impossible. Such files can be served to any number
of students by any static web server (README, "Past one machine")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specviz.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent

REPLAY = r"""
import sys, torch, transformers, specviz, specviz.models, specviz.tiny
from app import figures_html
from specviz.viz import acceptance, distributions, kv, proposals

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

traces = specviz.traces_from_json(open(sys.argv[1]).read())
figures = {}
for t in traces:
    figures[f"kv_{t.cycle}"] = kv.kv_figure(t, str)
    figures[f"proposals_{t.cycle}"] = proposals.proposals_figure(t)
    figures[f"acceptance_{t.cycle}"] = acceptance.acceptance_figure(t)
    figures[f"resolve_{t.cycle}"] = distributions.resolve_figure(t)
    if t.drafts:
        figures[f"pq_{t.cycle}"] = distributions.pq_figure(t, 0)
open(sys.argv[2], "w").write(figures_html(figures))
print(len(traces), len(figures))
"""


def test_traces_replay_to_standalone_html_without_any_model(tmp_path):
    traces = tmp_path / "traces.json"
    assert cli_main(["walk", "--tiny", "--cycles", "3", "--k", "3", "--json", str(traces)]) == 0
    assert len(json.loads(traces.read_text())) == 3
    page = tmp_path / "replay.html"
    done = subprocess.run([sys.executable, "-c", REPLAY, str(traces), str(page)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                                                       "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    num_traces, num_figures = map(int, done.stdout.split()[-2:])
    assert num_traces == 3 and num_figures >= 12
    html = page.read_text()
    assert html.count('class="plotly-graph-div"') == num_figures
    assert "Plotly.addFrames" in html  # the KV animation's frames are in the page
    assert "<script src=" not in html  # plotly.js is embedded: the page works offline, from any static host
