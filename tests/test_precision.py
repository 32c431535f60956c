"""The precision setting (specviz.precision): names and errors, the dtype-aware invariant tolerance,
a bfloat16 pair end to end (engine, trace, narrative, CLI, run file), and the app's selector."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from specviz import DecodeConfig, SpeculativeDecoder, build_tiny_pair, cli, models, narrative, precision
from specviz.errors import ConfigError
from specviz.runfile import load_run, record_run
from specviz.runtime import max_abs_kv_diff
from specviz.trace import CycleTrace

PROMPT = [5, 6, 7, 8, 9, 10, 5, 6, 7]
APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture(scope="module")
def bf16_pair():
    return build_tiny_pair(dtype="bfloat16")


def test_names_aliases_and_torch_dtypes():
    for given in ("bfloat16", "bf16", "BF16", "torch.bfloat16", torch.bfloat16):
        assert precision.dtype_name(given) == "bfloat16"
    for given in ("float32", "fp32", torch.float32):
        assert precision.dtype_name(given) == "float32"
    assert models.as_dtype("bf16") is torch.bfloat16 and models.as_dtype(None) is torch.float32  # CPU default
    assert precision.DTYPES[0] == precision.DEFAULT_DTYPE == "float32"


@pytest.mark.parametrize("bad", ["float8", "bfloat", "int8", torch.int64, ""])
def test_a_bad_dtype_is_a_clear_error(bad):
    with pytest.raises(ConfigError, match="choose one of float32, bfloat16"):
        precision.dtype_name(bad)


def test_a_bad_dtype_fails_before_anything_loads(monkeypatch, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("a model was located although the dtype was invalid")

    monkeypatch.setattr(models, "default_target_dir", must_not_run)
    monkeypatch.setattr(models, "resolve_model_dir", must_not_run)
    with pytest.raises(ConfigError, match="unknown precision 'fp8'"):
        models.load_default_pair(dtype="fp8")
    with pytest.raises(ConfigError, match="unknown precision 'half-ish'"):
        models.load_pair("some/target", "some/draft", draft_dtype="half-ish")
    with pytest.raises(ConfigError):
        build_tiny_pair(dtype="float8")
    assert cli.main(["walk", "--tiny", "--dtype", "float8"], out=io.StringIO()) == 2
    assert "unknown precision 'float8'" in capsys.readouterr().err


def test_tolerance_is_judged_by_dtype_and_shown_with_it():
    diffs = {"target": 0.3, "draft": 0.0}  # bfloat16 rounding on the default pair; a bug in float32
    assert precision.invariant_holds(diffs, "bfloat16") and not precision.invariant_holds(diffs, "float32")
    assert "within bfloat16's tolerance 1 (rounding, not a bug)" in precision.invariant_words(diffs, "bfloat16")
    shown = precision.invariant_words(diffs, "float32", {"draft": "draft model"})
    assert "target 3.0e-01, draft model 0.0e+00" in shown and "above float32's tolerance 0.001" in shown
    assert not precision.invariant_holds({"target": 7.8}, "bfloat16")  # a one-token-off cache of the default pair


def test_run_dtype_is_the_lowest_precision_of_the_pair():
    pair = build_tiny_pair()
    assert precision.run_dtype(pair.target, pair.draft) == "float32"
    assert precision.run_dtype(pair.target, pair.draft.to(torch.bfloat16)) == "bfloat16"
    assert precision.run_dtype(pair.target, None) == "float32"


def test_a_bfloat16_pair_decodes_and_every_record_says_so(bf16_pair, capsys):
    pair = bf16_pair
    for module in (pair.target, pair.draft, pair.feature_head):
        assert {p.dtype for p in module.parameters()} == {torch.bfloat16}
    for proposer in ("draft", "feature"):
        dec = SpeculativeDecoder(pair, DecodeConfig(k=3, proposer=proposer, temperature=1.0, seed=2, page_size=4,
                                                    max_new_tokens=30, check_invariant=True))
        dec.start(PROMPT)
        traces = [dec.step() for _ in range(5)]
        assert dec.dtype == "bfloat16" and {t.dtype for t in traces} == {"bfloat16"}
        worst = max(max(t.invariant_max_abs_diff.values()) for t in traces)
        assert worst <= precision.invariant_tolerance("bfloat16")
        # Power: the same target cache against the committed sequence with one token changed.
        wrong = dec.committed[: dec.target_cache.get_seq_length()]
        wrong[len(wrong) // 2] = (wrong[len(wrong) // 2] + 1) % 60
        assert max_abs_kv_diff(pair.target, dec.target_cache, wrong) > 5 * precision.invariant_tolerance("bfloat16")
        text = narrative.phase_markdown(traces[-1], "rollback")
        assert "within bfloat16's tolerance 1 (rounding, not a bug)" in text and "broken" not in text
        assert CycleTrace.from_dict(traces[-1].to_dict()).dtype == "bfloat16"
    # The run file keeps it; a file from before the setting reads as float32.
    record = record_run("t", "tiny", "feature", dec.config, "", False, PROMPT,
                        (dec.target_cache.snapshot(len(PROMPT)), None), traces, dec.token_text)
    again = load_run(record.to_json())
    assert again.dtype == "bfloat16" and '"dtype": "bfloat16"' in record.to_json()
    old = traces[0].to_dict()
    del old["dtype"]
    assert CycleTrace.from_dict(old).dtype == "float32"
    # The CLI: --dtype, and the tolerance named in the check line.
    out = io.StringIO()
    assert cli.main(["walk", "--tiny", "--dtype", "bf16", "--cycles", "2", "--check", "--k", "3"], out=out) == 0
    assert "bfloat16" in out.getvalue().splitlines()[0]
    assert out.getvalue().count("within bfloat16's tolerance") == 2


def test_float32_narrative_shows_its_own_tolerance():
    pair = build_tiny_pair()
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, check_invariant=True, max_new_tokens=10))
    dec.start(PROMPT)
    tr = dec.step()
    assert tr.dtype == "float32"
    assert "within float32's tolerance 0.001" in narrative.phase_markdown(tr, "rollback")


def test_the_app_precision_selector_restarts_the_run_and_names_it():
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["pair_kind"] = "tiny"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    first = at.session_state["_workspace"].run
    assert at.radio(key="dtype").value == "float32" and first.dtype == "float32"
    at.radio(key="dtype").set_value("bfloat16").run()
    assert not at.exception, [e.value for e in at.exception]
    ws = at.session_state["_workspace"]
    run = ws.run
    assert run is not first and run.dtype == "bfloat16" and "· bfloat16 ·" in run.label()
    assert next(run.pair.target.parameters()).dtype == torch.bfloat16
    assert run.restart_key[-1] == "bfloat16" and run.widgets["dtype"] == "bfloat16"
    assert any("the precision changed" in i.value for i in at.info), [i.value for i in at.info]
