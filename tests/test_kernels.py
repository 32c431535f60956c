"""specviz.kernels: the kernels chosen at load compute the same model, within float rounding.

Each candidate matches F.linear within the rounding bound of its reduction; a dropped plain weight
is rebuilt exactly; tied weights are never dropped; `SPECVIZ_KERNELS=reference` changes nothing;
timings are cached per machine and reused; and greedy speculative decoding still equals plain
greedy decoding of the model as run, under the reference kernels, the ones this machine selects,
and every linear forced onto the packed kernel (so the dispatch is exercised whatever this CPU
picks). No timing is asserted: speed lives in bench/verify_cost.py.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F
from engine_helpers import SHARPNESS
from tiny_models import tiny_model
from torch import nn

from specviz import AutoregressiveDecoder, DecodeConfig, FeatureHead, SpeculativeDecoder, kernels
from specviz.errors import ConfigError
from specviz.models import ModelPair

pytestmark = pytest.mark.skipif(not kernels.onednn_available(torch.float32), reason="no oneDNN linear here")

ROWS = (0, 1, 2, 3, 5, 7, 8, 9, 13, 33, 64, 70)  # in buckets, between them, past the last
PROMPT = [3, 17, 8, 42, 5, 11]


def _linear(in_features: int = 256, out_features: int = 384, bias: bool = True, dtype=torch.float32) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(in_features, out_features, bias=bias).to(dtype).requires_grad_(False)


def _force(model: nn.Module, name: str) -> None:
    """Every eligible linear of `model` on candidate `name` at every row count (packed: weights dropped
    where nothing else holds them)."""
    storage = "packed" if kernels.CANDIDATES[name][1] else "plain"
    for module in [m for m in model.modules() if kernels.eligible(m)]:
        kernels.swap(module, storage, kernels.everywhere(name))


def _padded_up(name: str) -> kernels.Choice:
    """`name` with every bucket but the last run as the next bucket, its extra rows zeros."""
    return {b: (name, kernels.BUCKETS[min(i + 1, len(kernels.BUCKETS) - 1)]) for i, b in enumerate(kernels.BUCKETS)}


@pytest.mark.parametrize("padded", [False, True], ids=["as-is", "padded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(kernels.CANDIDATES))
def test_every_candidate_equals_f_linear_within_rounding(name, dtype, padded):
    if not kernels.onednn_available(dtype):
        pytest.skip(f"no oneDNN {dtype} here")
    module = _linear(dtype=dtype)
    weight, bias = module.weight.clone(), module.bias.clone()
    choice = _padded_up(name) if padded else kernels.everywhere(name)
    kernels.swap(module, "packed" if kernels.CANDIDATES[name][1] else "plain", choice)
    if padded:
        assert all(isinstance(module.kernels[rows], kernels.Padded) for rows in range(kernels.BUCKETS[-2] + 1))
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for rows in ROWS:
            x = torch.randn(1, rows, 256, generator=gen).to(dtype)  # [B, T, in], as a model calls it
            got, want = module(x), F.linear(x, weight, bias)
            assert got.shape == want.shape == (1, rows, 384) and got.dtype == dtype
            bound = kernels.rounding_bound(weight, x[0], bias)
            assert ((got[0].float() - want[0].float()).abs() <= bound).all(), (name, rows)
            if rows:  # the bound has power: one input feature left out breaks it
                wrong = F.linear(x[0].index_fill(1, torch.tensor([0]), 0.0), weight, bias)
                assert ((wrong.float() - want[0].float()).abs() > bound).any()


def test_a_dropped_weight_is_rebuilt_exactly_and_restored():
    module = _linear()
    original = module.weight.clone()
    count = kernels.parameter_count(module)
    kernels.swap(module, "packed", kernels.everywhere("onednn_packed"))
    assert kernels.parameter_count(module) == count == 256 * 384 + 384  # the dropped weight still counts
    assert "weight" not in module._parameters and isinstance(module, kernels.SelectedLinear)
    assert torch.equal(module.weight, original)  # rebuilt from the packed copy, bit for bit
    assert torch.equal(module.state_dict()["weight"], original) and "bias" in module.state_dict()
    kernels.restore(module)
    assert type(module) is nn.Linear and isinstance(module.weight, nn.Parameter)
    assert torch.equal(module.weight, original)


def test_reference_mode_keeps_plain_linears(monkeypatch, tmp_path):
    monkeypatch.setenv(kernels.MODE_ENV, "reference")
    model = tiny_model("llama", hidden_size=256)
    summary = kernels.install([("target", model, True)], tmp_path / "kernels.json")
    assert summary["mode"] == "reference"
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))
    assert not (tmp_path / "kernels.json").exists()
    monkeypatch.setenv(kernels.MODE_ENV, "fastest")
    with pytest.raises(ConfigError, match="reference"):
        kernels.install([("target", model, True)], tmp_path / "kernels.json")


def test_timings_are_cached_per_machine_and_reused(monkeypatch, tmp_path):
    monkeypatch.delenv(kernels.MODE_ENV, raising=False)
    path = tmp_path / "kernels.json"
    first = kernels.install([("target", tiny_model("llama", hidden_size=256), True)], path)
    assert first["measured_now"] and path.is_file()
    description, key = kernels.machine()
    stored = json.loads(path.read_text())[key]
    assert stored["machine"] == description and set(first["measured_now"]) <= set(stored["shapes"])
    timed = stored["shapes"][first["measured_now"][0]]
    assert set(timed) <= set(kernels.CANDIDATES) and "reference" in timed
    assert {int(m) for m in timed["reference"]} == set(kernels.BUCKETS)
    calls = []
    monkeypatch.setattr(kernels, "time_shape", lambda *a, **k: calls.append(a))
    second = kernels.install([("target", tiny_model("llama", hidden_size=256, seed=1), True)], path)
    assert second["measured_now"] == [] and calls == []  # the same shapes: read, not timed again


def test_tiny_linears_keep_nn_linear(monkeypatch, tmp_path):
    monkeypatch.delenv(kernels.MODE_ENV, raising=False)
    model = tiny_model("llama")  # hidden 32: every product below MIN_WEIGHTS
    summary = kernels.install([("target", model, True)], tmp_path / "kernels.json")
    assert summary["measured_now"] == [] and not any(isinstance(m, kernels.SelectedLinear) for m in model.modules())


def _timings(packed_one_row: float, packed_more: float) -> dict[str, dict[int, float]]:
    return {
        "reference": {b: 10.0 * b for b in kernels.BUCKETS},
        "onednn": {b: 10.0 + 7.0 * b for b in kernels.BUCKETS},
        "onednn_packed": {b: packed_one_row if b == 1 else packed_more * b for b in kernels.BUCKETS},
        "weight_left": {b: 11.0 * b for b in kernels.BUCKETS},
    }


def test_decide_drops_a_weight_only_where_one_row_is_as_fast_and_nothing_else_reads_it():
    fast = _timings(9.8, 5.0)  # packed as fast at one row (within ONE_ROW_SLACK), twice as fast beyond
    storage, choice = kernels.decide(fast, can_drop=True, may_keep_both=False)
    assert storage == "packed" and {name for name, _ in choice.values()} == {"onednn_packed"}
    assert kernels.decide(fast, can_drop=False, may_keep_both=True)[0] == "both"
    storage, choice = kernels.decide(fast, can_drop=False, may_keep_both=False)
    assert storage == "plain" and choice[1] == ("reference", 1) and choice[8] == ("onednn", 8)
    slow_one_row = _timings(12.0, 6.5)  # plain decoding would get slower (padded too): the plain weight stays
    storage, choice = kernels.decide(slow_one_row, can_drop=True, may_keep_both=True)
    assert storage == "both" and choice[1] == ("reference", 1) and choice[4] == ("onednn_packed", 4)


def test_decide_pads_a_row_count_where_a_larger_one_costs_less():
    """MKL on an AVX2 CPU: x·Wᵀ costs for 3 rows twice its 4-row cost, and (W·xᵀ)ᵀ serves one row
    fastest as two (kernels.json of this EPYC capped to AVX2, the output head)."""
    head = {
        "reference": {1: 9.3, 2: 20.4, 3: 30.6, 4: 15.7, 6: 17.0, 8: 18.0, 12: 25.0, 16: 30.0, 32: 55.0},
        "weight_left": {1: 9.2, 2: 5.7, 3: 8.5, 4: 8.1, 6: 12.0, 8: 14.4, 12: 22.0, 16: 28.0, 32: 60.0},
    }
    storage, choice = kernels.decide(head, can_drop=False, may_keep_both=False)
    assert storage == "plain"
    assert choice[1] == ("weight_left", 2) and choice[2] == ("weight_left", 2)
    assert choice[3] == ("weight_left", 3)  # 4 rows (8.1) is not 5 % cheaper than 3 (8.5): no padding
    assert choice[32] == ("reference", 32)  # F.linear within MARGIN of the best keeps its bucket
    slow_three = {"reference": {**head["reference"]}}
    assert kernels.decide(slow_three, can_drop=False, may_keep_both=False)[1][3] == ("reference", 4)
    table = kernels.dispatch_table(choice)
    assert isinstance(table[1], kernels.Padded) and table[1].rows == 2 and table[0].rows == 2
    assert table[2] is kernels.CANDIDATES["weight_left"][0] and table[5] is kernels.CANDIDATES["weight_left"][0]


def test_a_tied_output_head_keeps_its_weight(monkeypatch, tmp_path):
    monkeypatch.delenv(kernels.MODE_ENV, raising=False)
    model = tiny_model("llama", vocab_size=256, hidden_size=256)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    monkeypatch.setattr(kernels, "time_shape", lambda modules, names, *a, **k: _timings(10.0, 5.0))
    monkeypatch.setattr(kernels, "EXTRA_BYTES_SHARE", 0.0)  # no second copies: tied means plain
    kernels.install([("target", model, True)], tmp_path / "kernels.json")
    assert model.lm_head.weight is model.model.embed_tokens.weight and "weight" in model.lm_head._parameters
    assert "weight" not in model.model.layers[0].mlp.up_proj._parameters  # the rest dropped theirs


def _pair(variant: str, tmp_path) -> ModelPair:
    """A random Llama pair big enough for kernels to be chosen (hidden 256), its draft a noisy copy,
    with a random feature head, running `variant`'s kernels."""
    target, draft = (tiny_model("llama", vocab_size=64, hidden_size=256) for _ in range(2))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for model in (target, draft):
            model.config.eos_token_id = model.generation_config.eos_token_id = None
            model.get_output_embeddings().weight.mul_(SHARPNESS["llama"])
        for param in draft.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.2 * param.std())
    pair = ModelPair(
        target=target.requires_grad_(False),
        draft=draft.requires_grad_(False),
        tokenizer=None,
        feature_head=FeatureHead.random(target, seed=0),
    )
    if variant == "selected":
        kernels.install_pair(pair, tmp_path / "kernels.json")
    elif variant == "packed":
        for model in (pair.target, pair.draft, pair.feature_head):
            _force(model, "onednn_packed")
    return pair


@pytest.mark.parametrize("variant", ["reference", "selected", "packed"])
@pytest.mark.parametrize(("proposer", "k"), [("draft", 4), ("feature", 3)])
def test_greedy_speculative_equals_plain_greedy_under_each_kernel_choice(variant, proposer, k, monkeypatch, tmp_path):
    monkeypatch.delenv(kernels.MODE_ENV, raising=False)
    pair = _pair(variant, tmp_path)
    if variant == "packed":  # "selected" may keep F.linear for shapes this small: that is its choice
        assert any(isinstance(m, kernels.SelectedLinear) for m in pair.target.modules())
    new = 20
    with torch.inference_mode():
        generated = pair.target.generate(
            torch.tensor([PROMPT]), do_sample=False, max_new_tokens=new, min_new_tokens=new
        )[0].tolist()
    plain = AutoregressiveDecoder(pair.target, DecodeConfig(temperature=0, max_new_tokens=new))
    plain.start(PROMPT)
    assert plain.committed + plain.generate() == generated  # HF generate runs the same kernels
    dec = SpeculativeDecoder(
        pair, DecodeConfig(k=k, proposer=proposer, temperature=0, max_new_tokens=new, check_invariant=True)
    )
    dec.start(PROMPT)
    traces = [dec.step() for _ in range(new) if not dec.finished]
    assert dec.committed == generated
    assert max(max(t.invariant_max_abs_diff.values()) for t in traces) < 1e-3  # float32's invariant tolerance


def test_selected_kernels_give_the_reference_logits_within_rounding(monkeypatch, tmp_path):
    monkeypatch.delenv(kernels.MODE_ENV, raising=False)
    reference, packed = _pair("reference", tmp_path), _pair("packed", tmp_path)
    ids = torch.tensor([PROMPT * 4])
    with torch.inference_mode():
        want, got = reference.target(ids).logits, packed.target(ids).logits
    # float32 rounding over reductions of 256..512 terms, through 2 layers: ~1e-6 of the logits' scale
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.fixture(scope="module", params=["reference", "selected"])
def default_pair(request):
    from specviz import load_default_pair

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv(kernels.MODE_ENV, request.param)
        yield request.param, load_default_pair()


@pytest.mark.slow
def test_default_pair_greedy_speculative_equals_generate_under_each_kernel_choice(default_pair):
    from specviz.cli import encode_prompt

    variant, pair = default_pair
    if variant == "reference":
        assert not any(isinstance(m, kernels.SelectedLinear) for m in pair.target.modules())
    prompt = encode_prompt(pair.tokenizer, "What is the capital of France?")
    new = 24
    with torch.inference_mode():
        generated = pair.target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new)[0].tolist()
    dec = SpeculativeDecoder(
        pair, DecodeConfig(k=4, proposer="feature", temperature=0, max_new_tokens=new, check_invariant=True)
    )
    dec.start(prompt)
    traces = []
    while not dec.finished:
        traces.append(dec.step())
    assert dec.committed == generated
    assert max(max(t.invariant_max_abs_diff.values()) for t in traces) < 1e-3  # float32's invariant tolerance


def test_verify_cost_reports_both_kernels_in_its_own_section(tmp_path):
    from bench import separate, verify_cost

    out = tmp_path / "docs"
    out.mkdir()
    args = [
        "--shape",
        "tiny",
        "--kernels",
        "reference,selected",
        "--reps",
        "2",
        "--min-reps",
        "2",
        "--ns",
        "1,2",
        "--threads",
        "1",
        "--dtypes",
        "float32",
        "--plain-tokens",
        "4",
        "--into",
        str(out),
    ]
    assert verify_cost.main(args) == 0
    text = (out / "benchmarks.md").read_text()
    assert text.count("<!-- verify_kernels:begin -->") == 1 and "sel ÷ ref" in text and "tokens/s" in text
    result = json.loads((out / "benchmarks.json").read_text())["verify_kernels"]
    assert {(r["kernel"], r["n"]) for r in result["rows"]} == {(k, n) for k in verify_cost.KERNELS for n in (1, 2)}
    assert result["kernel_logit_diff"]["float32"]["argmax_flips"] == 0  # tiny shapes: both run nn.Linear
    assert "verify_kernels" in separate.SEPARATE and "step_profile" in separate.SEPARATE


@pytest.mark.slow  # a statistical check: 1,000 seeded runs
def test_sampling_under_packed_kernels_follows_the_target_distribution():
    """The chi-square test of test_exactness.py with every linear of the tiny pair forced onto the
    packed kernel (sizes the selection itself would leave alone): the first two tokens' joint law."""
    import collections

    from cuda_checks import EXACT_PROMPT, VOCAB, chi_square, exact_joint, seeded_windows
    from engine_helpers import make_pair

    pair = make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3)
    for model in (pair.target, pair.draft):
        for module in [m for m in model.modules() if type(m) is nn.Linear]:
            kernels.swap(module, "packed", kernels.everywhere("onednn_packed"))
    cfg = DecodeConfig(k=3, temperature=1.0, instrument=False, max_new_tokens=16)
    with torch.inference_mode():
        expected = exact_joint(pair.target, cfg)
    runs = 1000
    counts = collections.Counter(
        tuple(dec.committed[len(EXACT_PROMPT) : len(EXACT_PROMPT) + 2])
        for dec, _ in seeded_windows(pair, cfg, EXACT_PROMPT, runs)
    )
    stat, pvalue = chi_square(counts, expected, runs)
    assert pvalue > 0.01, (stat, pvalue)
    draft_law = exact_joint(pair.draft, cfg)  # power: the draft's own law is far from these samples
    assert chi_square(counts, draft_law, runs)[1] < 1e-6


def test_timings_made_under_an_isa_cap_are_kept_apart(monkeypatch):
    """Under ONEDNN_MAX_CPU_ISA=AVX2 (and its siblings) an AVX-512 machine runs an AVX2-only CPU's
    code: its kernel timings and cost law must not be mistaken for the machine's own."""
    from bench.common import cpu_name
    from specviz import cachedir

    for name in cachedir.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    plain_description, plain_key = kernels.machine()
    assert cachedir.isa_caps() == "" and "capped" not in plain_description and "capped" not in cpu_name()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    description, key = kernels.machine()
    assert key != plain_key and "capped: ONEDNN_MAX_CPU_ISA=AVX2" in description
    assert cpu_name().endswith("(ISA capped: ONEDNN_MAX_CPU_ISA=AVX2)")


def _resident_bytes(tensor: torch.Tensor) -> int:
    """Resident bytes of the mapping that holds `tensor` (/proc/self/smaps)."""
    address, inside = tensor.data_ptr(), False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            start, _, end = fields[0].partition("-")
            inside = int(start, 16) <= address < int(end, 16)
        elif inside and fields[0] == "Rss:":
            return int(fields[1]) * 1024
    raise AssertionError("no mapping holds the tensor")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_a_dropped_weight_hands_back_its_pages_of_the_model_file(tmp_path):
    """A weight mapped privately from a file (as safetensors loads one) keeps its pages resident after
    packing read them: handing them back empties the mapping, and the values read again are the file's."""
    path = tmp_path / "weights.bin"
    values = torch.arange(4 << 20, dtype=torch.float32)  # 16 MiB
    values.numpy().tofile(path)
    mapped = torch.from_file(str(path), shared=False, size=values.numel(), dtype=torch.float32)
    assert float(mapped.sum()) == float(values.sum())  # every page read once, as packing reads them
    before = _resident_bytes(mapped)
    assert before >= 15 << 20
    released = kernels.release_file_pages([mapped])
    assert released >= 15 << 20 and _resident_bytes(mapped) <= before - released + (1 << 20)
    assert torch.equal(mapped, values)  # read again from the file: nothing lost
    anonymous = values.clone()  # not a file's pages: left alone
    assert kernels.release_file_pages([anonymous]) == 0 and torch.equal(anonymous, values)
