"""The proposer table (`specviz.proposers.registry`) is the one place a proposer is declared.

A fourth proposer — a class defined here, which always proposes token 0 with a point-mass q, and one
table row, nothing else edited — shows up in the sidebar's options, the CLI's choices and help, the
narrative, the KV picture, the proposals panel and the benchmark's list, and decodes exactly through
`SpeculativeDecoder` with the cache invariant holding. The table is torch-free, checks every name,
says why a pair cannot run a proposer, and agrees with the classes it names.
"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import torch
from engine_helpers import assert_invariant, make_pair
from streamlit.testing.v1 import AppTest

from bench.proposers import available
from specviz import DecodeConfig, SpeculativeDecoder, build_tiny_pair, cli, narrative
from specviz.errors import ConfigError
from specviz.models import ModelPair
from specviz.proposers import Drafts, Proposer, ProposerEntry, Words, registry
from specviz.trace import CYCLE_PHASES
from specviz.viz.kv_html import kv_stage_html
from specviz.viz.proposals import proposals_figure


class ZeroProposer(Proposer):
    """Always proposes token 0, with q one-hot on it: no weights, no cache."""

    name = "zero"

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.vocab_size, self.device = vocab_size, device

    @classmethod
    def from_pair(cls, pair, config, max_context, vocab_size):
        return cls(vocab_size, next(pair.target.parameters()).device)

    def propose(self, committed, k, distribution, greedy, generator, min_confidence=0.0):
        q = torch.zeros(self.vocab_size, device=self.device)
        q[0] = 1.0  # a deterministic guess: q is one-hot, as prompt lookup's
        return Drafts([0] * k, [q] * k, [], "guessed token 0 at every position")


ZERO = ProposerEntry(
    name="zero", label="Always zero (a test's proposer)", description="always proposes token 0",
    cli_help="always proposes token 0 (a test's proposer)", cls=f"{__name__}:ZeroProposer",
    words=Words(
        noun="zero proposer", short="zero proposer", no_cache="it always guesses token 0",
        drafts="No model runs. {note} Each q_i is **one-hot** on token 0: {proposals}.",
        tree="It would guess token 0 at every depth.", copies="it always guesses token 0",
        proposals="the zero proposer guesses token 0 (K = {k}): q = 1 on d_i",
    ),
    one_hot=True,
)  # fmt: skip


@pytest.fixture
def zero():
    """The fourth proposer, in the table for one test only."""
    with registry.registered(ZERO) as entry:
        yield entry
    assert "zero" not in registry.names()


def test_a_fourth_proposer_decodes_exactly_with_the_cache_invariant(zero):
    pair = make_pair()
    dec = SpeculativeDecoder(pair, DecodeConfig(proposer="zero", k=3, page_size=4, max_new_tokens=20))
    dec.start([3, 17, 42, 5, 9])
    for _ in range(4):
        tr = dec.step()
        assert_invariant(dec)
        assert tr.proposer == "zero" and [d.token_id for d in tr.drafts] == [0] * tr.k
        assert all(d.draft_prob == 1.0 for d in tr.drafts) and dec.draft_cache is None
    texts = {phase: narrative.phase_markdown(tr, phase) for phase in CYCLE_PHASES}
    assert "Zero proposer keeps **no cache**: it always guesses token 0." in texts["start"]
    assert "**Zero proposer proposes.** No model runs. Guessed token 0 at every position." in texts["draft"]
    assert "q_i is one-hot (zero proposer)" in texts["accept"]  # T = 1: u_i ≤ p_i(d_i)
    assert "Zero proposer keeps no cache: only the target rolls back." in texts["rollback"]
    assert "watch the zero proposer propose" in narrative.prefill_markdown(5, 4, None, "zero")
    html = kv_stage_html(tr.snapshot("draft"), None, str, trace=tr, phase="draft", proposer="zero")
    assert "Zero proposer keeps no draft cache" in html and "it always guesses token 0" in html
    assert "the zero proposer guesses token 0" in proposals_figure(tr).layout.title.text


def test_a_fourth_proposer_is_offered_by_the_sidebar_the_cli_and_the_benchmarks(zero, capsys):
    def selector(pair):
        from specviz.ui import sidebar

        sidebar.proposer_control(pair)

    tiny = build_tiny_pair(seed=0)
    at = AppTest.from_function(selector, args=(tiny,), default_timeout=30)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="proposer").options[-1] == "Always zero (a test's proposer)"
    assert "zero" in available(tiny)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["walk", "--help"])
    assert "zero = always proposes token 0 (a test's proposer)" in " ".join(capsys.readouterr().out.split())
    out = io.StringIO()
    args = cli.build_parser().parse_args(["walk", "--tiny", "--proposer", "zero", "--k", "2", "--cycles", "2"])
    assert cli.walk(args, out) == 0
    assert "proposer zero (always proposes token 0)" in out.getvalue() and "proposer zero ===" in out.getvalue()


ALL = ("draft", "feature", "lookup", "retrieval", "feature+retrieval", "feature+lookup")


def test_the_table_knows_every_name_and_says_why_a_pair_cannot_run_one():
    assert registry.names() == ALL and "zero" not in registry.names()
    with pytest.raises(ConfigError, match=r"one of \('draft', 'feature', 'lookup', 'retrieval', "
                       r"'feature\+retrieval', 'feature\+lookup'\), "
                       r"got 'medusa'"):
        DecodeConfig(proposer="medusa")
    with pytest.raises(ConfigError, match="proposer must be one of"):
        narrative.prefill_markdown(5, 4, None, "medusa")  # no silent fallback to a draft model's words
    pair = make_pair()
    bare = ModelPair(target=pair.target, draft=None, tokenizer=None)
    assert [e.name for e in registry.available(bare)] == ["lookup", "retrieval"]
    assert registry.get("draft").unavailable(bare) == "this pair has no draft model"
    assert "feature head" in registry.get("feature").unavailable(bare)
    assert [e.name for e in registry.available(pair)] == list(ALL)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("draft"))


def test_the_table_agrees_with_the_classes_it_names():
    for entry in registry.entries():
        cls = entry.load()
        assert cls.name == entry.name and issubclass(cls, Proposer)
        assert entry.has_cache == (entry.words.cache != "") == (entry.cache_title is not None)


def test_the_table_imports_without_torch():
    """config.py, the table and the narrative's and views' words load no model library (the
    package `specviz/__init__` is skipped: it imports the engine)."""
    code = (
        "import sys, types; pkg = types.ModuleType('specviz'); pkg.__path__ = ['specviz']; "
        "sys.modules['specviz'] = pkg; "
        "import specviz.config, specviz.proposers.registry, specviz.viz.cache_words; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
