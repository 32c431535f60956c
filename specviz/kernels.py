"""Kernels chosen at load: the fastest exact matrix product for each linear layer and row count.

Almost all of a decoding step on a CPU is ``nn.Linear``: one pass streams every weight once, so a
one-token step is bound by memory bandwidth and a verify pass over N tokens *should* cost little
more (the same bytes, N times the arithmetic). Whether it does depends on the kernel behind
``F.linear``. For float32 that is MKL: one row goes to its matrix-vector kernel, two or more to
``sgemm``, whose blocking is tuned for large matrices and, on some CPUs (AMD ones, where MKL's
CPU check keeps it off its fastest paths), costs for 2 rows what two 1-row products cost. oneDNN
(``torch.ops.mkldnn._linear_pointwise``) computes the same product with kernels made for small
batches; it is fastest when the weight is **prepacked** once (``_reorder_linear_weight``): copied
into the blocked layout its kernel reads, so no call pays for the reordering. A packed weight is a
second copy, so where it serves one row as fast as the plain weight the plain one is dropped
(``weight`` is then rebuilt on demand from the packed copy: exactly, by ``to_dense``).

Which kernel wins depends on the CPU, the dtype, the shape and the row count, so nothing here is
assumed: for each distinct linear shape (in, out, dtype, bias) of the pair and each row bucket,
every available candidate is timed on the model's own weights, interleaved, and the fastest is
used for that row count (`decide`), padded with zero rows to a larger bucket where that bucket costs
less (`padded_costs`: MKL's 3-row product can cost more than its 4-row one). Candidates must
compute the same product: a candidate whose output differs from ``F.linear`` by more than float
rounding is never used. The timings are cached
per machine (CPU model, ISA flags, threads, torch version) in the user cache; ``SPECVIZ_KERNELS=
reference`` keeps plain ``nn.Linear`` everywhere. The dispatch lives on the modules themselves
(`SelectedLinear`), so every caller of the model (both decoders, HF ``generate``) gets it, and a
product's rounding depends only on its row count: exactness stays relative to the model as run
(docs/design.md §3, "Kernels chosen at load").
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .cachedir import isa_caps

MODE_ENV = "SPECVIZ_KERNELS"  # "reference": plain nn.Linear; unset or "selected": timed at load
VERSION = 6  # bump when candidates or the timing method change: cached timings are measured again
# Row counts timed; a count between two buckets uses the larger bucket's kernel (padded only where
# that bucket's is), and a count above the last (a prefill) the last bucket's. 1 = a plain step;
# 2..9 = chains of up to 8 drafts (5 takes 6's, 9 takes 12's); 13, 17, 25, 33 = token trees of 12..32 nodes.
BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32)
# Linears with fewer weights keep nn.Linear: their product takes a few microseconds, about what the
# dispatch itself costs, and timing noise would exceed any difference (the tiny test models).
MIN_WEIGHTS = 2**15
ONE_ROW_SLACK = 1.0  # a packed copy replaces a plain weight only if one row costs at most this factor of it
COLD_BYTES = 40 << 20  # a shape is timed over up to this many bytes of its layers (past the caches)
ROUNDS = 5  # timing rounds per shape (every candidate and bucket once per round; the fastest counts)
MARGIN = 0.05  # another kernel replaces F.linear at a row count only when this much faster
EXTRA_BYTES_SHARE = 0.05  # packed copies kept beside their plain weight: at most this share of the models' bytes

Progress = Callable[[str, "float | None"], None]


# ---------------------------------------------------------------- candidates


def _reference(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, module.weight, module.bias)


def _onednn(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, module.weight, module.bias, "none", [], "")


def _onednn_packed(module: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, module.packed, module.bias, "none", [], "")


def _weight_left(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """(W·xᵀ)ᵀ: the product with the weight as BLAS's left operand and the rows as the right one's
    columns. The same sums; but MKL then streams the weight once for all rows, where ``F.linear``'s
    x·Wᵀ runs, on AVX2 and AVX-512 CPUs alike, 2 or 3 rows at the cost of 2 or 3 one-row products."""
    rows = x.reshape(-1, module.in_features)
    out = torch.mm(module.weight, rows.t()).t().contiguous()  # row-major, as every caller views it
    if module.bias is not None:
        out.add_(module.bias)
    return out.reshape(*x.shape[:-1], module.out_features)


# name -> (kernel, reads the packed copy). "reference" is F.linear (MKL for float32 on x86); "onednn"
# hands the plain weight to oneDNN (it reorders per call); "onednn_packed" reads the prepacked copy;
# "weight_left" is MKL on the plain weight with the operands swapped.
CANDIDATES: dict[str, tuple[Callable[[Any, torch.Tensor], torch.Tensor], bool]] = {
    "reference": (_reference, False),
    "onednn": (_onednn, False),
    "onednn_packed": (_onednn_packed, True),
    "weight_left": (_weight_left, False),
}

# A kernel chosen for a bucket: (candidate, the row count it runs as). That count is the bucket's
# own, or a larger bucket's where computing the extra rows as zeros costs less (MKL's 3-row sgemm
# can cost more than its 4-row one; one row may run faster as two): every real row's sums are the
# same, and which count a row runs as depends only on its own pass's row count.
Choice = dict[int, tuple[str, int]]


def everywhere(name: str) -> Choice:
    """`name` at every bucket, unpadded (tests and forced runs)."""
    return {b: (name, b) for b in BUCKETS}


class Padded:
    """A candidate run on the rows padded with zero rows to `rows` (the extra outputs dropped)."""

    def __init__(self, name: str, rows: int) -> None:
        self.name, self.rows, self.kernel = name, rows, CANDIDATES[name][0]

    def __call__(self, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, module.in_features)
        padded = torch.cat([flat, flat.new_zeros(self.rows - flat.shape[0], module.in_features)])
        return self.kernel(module, padded)[: flat.shape[0]].reshape(*x.shape[:-1], module.out_features)


def pack(weight: torch.Tensor, batch_hint: int = 4) -> torch.Tensor:
    """The weight reordered once into oneDNN's blocked layout (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_hint)


def onednn_available(dtype: torch.dtype) -> bool:
    """Whether this torch build and CPU run oneDNN's linear in `dtype` (probed once per dtype)."""
    if dtype not in _PROBED:
        _PROBED[dtype] = _probe(dtype)
    return _PROBED[dtype]


_PROBED: dict[torch.dtype, bool] = {}


def _probe(dtype: torch.dtype) -> bool:
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        probe = nn.Linear(64, 48).to(dtype)
        probe.packed = pack(probe.weight)
        x = torch.randn(3, 64).to(dtype)
        want = F.linear(x, probe.weight, probe.bias).float()
        return all(torch.allclose(fn(probe, x).float(), want, rtol=1e-2, atol=1e-2) for fn, _ in CANDIDATES.values())
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def rounding_bound(weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The largest difference two correct kernels may show for x @ W.T + b, elementwise. Each sums
    the n = in_features + 1 terms in its own order, accumulating in float32 (bfloat16 kernels do
    too), with error at most n·u·Σ|terms| (u = float32's unit roundoff; Higham, Accuracy and
    Stability, §3.1), then rounds once to the output dtype (u_out·|y|); two of them differ by at
    most twice that (plus 1 % for second-order terms)."""
    u_acc = torch.finfo(torch.float32).eps / 2
    u_out = torch.finfo(weight.dtype).eps / 2
    n = weight.shape[1] + 1
    magnitude = x.abs().float() @ weight.abs().float().T  # [rows, out]
    if bias is not None:
        magnitude = magnitude + bias.abs().float()
    return 2.02 * (n * u_acc + u_out) * magnitude + 1e-30


# ---------------------------------------------------------------- the dispatching module


class SelectedLinear(nn.Linear):
    """An ``nn.Linear`` that runs each row count with the kernel `decide` chose for it. Installed by
    swapping an existing module's class (its hooks, names and bias stay); ``restore`` undoes it.

    ``kernels`` maps a row count (index) to its kernel; counts past the end use the last. With
    its plain weight dropped, ``weight`` is rebuilt from the packed copy on each read (exact, a
    copy: for export and state dicts, not for the hot path) and ``state_dict`` carries it."""

    packed: torch.Tensor | None
    kernels: tuple[Callable[[Any, torch.Tensor], torch.Tensor], ...]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad and torch.is_grad_enabled():  # training: autograd needs the plain path
            return F.linear(x, self.weight, self.bias)
        rows = x.numel() // self.in_features  # every kernel takes [..., in] as F.linear does
        kernels = self.kernels
        return (kernels[rows] if rows < len(kernels) else kernels[-1])(self, x)

    def __getattr__(self, name: str) -> Any:
        if name == "weight" and "weight" not in self._parameters and self.__dict__.get("packed") is not None:
            return self.__dict__["packed"].to_dense()
        return super().__getattr__(name)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if "weight" not in self._parameters:
            destination[prefix + "weight"] = self.weight


# ---------------------------------------------------------------- timing


@dataclass(frozen=True)
class Shape:
    """What a linear's timing depends on: one entry of the cache per machine."""

    in_features: int
    out_features: int
    dtype: str
    bias: bool

    @property
    def key(self) -> str:
        return f"{self.in_features}x{self.out_features}/{self.dtype}/{'bias' if self.bias else 'nobias'}"

    @property
    def bytes(self) -> int:
        return self.in_features * self.out_features * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


def shape_of(module: nn.Linear) -> Shape:
    weight = module.weight
    return Shape(
        module.in_features, module.out_features, str(weight.dtype).removeprefix("torch."), module.bias is not None
    )


def _time_once(kernel: Callable, modules: list[Any], x: torch.Tensor) -> list[float]:
    """µs of each layer's product, one after another (a pass over the shape's layers)."""
    times = []
    clock = time.perf_counter
    for module in modules:
        t0 = clock()
        kernel(module, x)
        times.append((clock() - t0) * 1e6)
    return times


def time_shape(
    modules: list[nn.Linear], names: Iterable[str], buckets: tuple[int, ...] = BUCKETS, rounds: int = ROUNDS
) -> dict[str, dict[int, float]]:
    """µs per product of each candidate at each bucket, over `modules` (layers of one shape, as
    many as `COLD_BYTES` allows, so their weights come from memory as in a real pass). Every round
    times every bucket and candidate back to back, in an order that alternates, each layer's
    product timed alone; a candidate's time is the mean over layers of each layer's fastest round:
    on a shared machine other work only ever adds time, so the minimum estimates the undisturbed
    cost that medians, under heavy load, do not. Candidates that disagree with F.linear beyond
    rounding are left out."""
    shape = shape_of(modules[0])
    modules = modules[: max(1, COLD_BYTES // max(1, shape.bytes))]
    names = list(names)
    gen = torch.Generator().manual_seed(0)
    inputs = {m: torch.randn(m, shape.in_features, generator=gen).to(modules[0].weight.dtype) for m in buckets}
    names = ["reference"] + [n for n in names if n != "reference" and _agrees(n, modules[0], inputs[max(buckets)])]
    samples: dict[str, dict[int, list[list[float]]]] = {n: {m: [] for m in buckets} for n in names}
    with torch.inference_mode():
        for n in names:  # warm-up: oneDNN builds its primitives on first use
            for m in buckets:
                CANDIDATES[n][0](modules[0], inputs[m])
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for m in buckets if r % 2 == 0 else buckets[::-1]:
                for n in order:
                    samples[n][m].append(_time_once(CANDIDATES[n][0], modules, inputs[m]))
    # Per layer the fastest round, then the mean over layers: each sample is one product (tens of
    # µs to a few ms), short enough that most rounds see some of them undisturbed.
    return {n: {m: statistics.fmean(map(min, zip(*v))) for m, v in by.items()} for n, by in samples.items()}


def _agrees(name: str, module: Any, x: torch.Tensor) -> bool:
    with torch.inference_mode():
        want = F.linear(x, module.weight, module.bias).float()
        try:
            got = CANDIDATES[name][0](module, x).float()
        except (RuntimeError, NotImplementedError):
            return False
    return bool(((got - want).abs() <= rounding_bound(module.weight, x, module.bias)).all())


# ---------------------------------------------------------------- choosing


def decide(timings: dict[str, dict[int, float]], can_drop: bool, may_keep_both: bool) -> tuple[str, Choice]:
    """(storage, bucket -> kernel) for one linear from its shape's timings. Storage "packed"
    (the plain weight dropped) where the packed copy serves one row within `ONE_ROW_SLACK` of the
    best plain kernel and nothing else reads the plain weight; "both" where a packed copy wins
    elsewhere and the memory budget allows a second copy; else "plain". Within a storage, each
    bucket takes its fastest kernel, padded to a larger bucket where that costs less."""
    costs = padded_costs(timings)
    plain = {n: c for n, c in costs.items() if not CANDIDATES[n][1]}
    packed = {n: c for n, c in costs.items() if CANDIDATES[n][1]}
    if packed and can_drop and _best(packed, 1) <= ONE_ROW_SLACK * _best(plain, 1):
        return "packed", _fastest(packed, timings)
    if packed and may_keep_both:
        both = _fastest(costs, timings)
        if any(CANDIDATES[n][1] and costs[n][m][0] < 0.9 * _best(plain, m) for m, (n, _) in both.items()):
            return "both", both
    return "plain", _fastest(plain, timings)


def padded_costs(timings: dict[str, dict[int, float]]) -> dict[str, dict[int, tuple[float, int]]]:
    """(µs, rows run as) per candidate and bucket: the bucket as itself, or padded to the larger
    bucket that costs least, where that is `MARGIN` cheaper (padding copies the rows once)."""
    costs = {}
    for name, by in timings.items():
        costs[name] = {}
        for m, own in by.items():
            cost, rows = min((t, b) for b, t in by.items() if b >= m)
            costs[name][m] = (cost, rows) if cost < (1 - MARGIN) * own else (own, m)
    return costs


def _best(costs: dict[str, dict[int, tuple[float, int]]], bucket: int) -> float:
    return min(c[bucket][0] for c in costs.values())


def _fastest(costs: dict[str, dict[int, tuple[float, int]]], timings: dict[str, dict[int, float]]) -> Choice:
    """The fastest kernel per bucket; F.linear, unpadded, keeps a bucket unless beaten by `MARGIN`
    (timing noise must not slow a bucket down, plain decoding above all)."""
    out: Choice = {}
    for m in next(iter(costs.values())):
        best = min(costs, key=lambda n: costs[n][m][0])
        keep = "reference" in costs and costs[best][m][0] > (1 - MARGIN) * timings["reference"][m]
        out[m] = ("reference", m) if keep else (best, costs[best][m][1])
    return out


def dispatch_table(choice: Choice) -> tuple[Callable[[Any, torch.Tensor], torch.Tensor], ...]:
    """Kernels indexed by row count 0..max bucket: each count takes the kernel of the smallest
    bucket that holds it (0 rows: bucket 1's; a count past the last bucket: the last entry's),
    padded to the rows that kernel runs as where it runs as a larger bucket."""
    buckets = sorted(choice)
    table = []
    for rows in range(buckets[-1] + 1):
        bucket = next(b for b in buckets if b >= max(rows, 1))
        name, runs_as = choice[bucket]
        table.append(Padded(name, runs_as) if runs_as > bucket else CANDIDATES[name][0])
    return tuple(table)


# ---------------------------------------------------------------- installing


def mode() -> str:
    """ "reference" (plain nn.Linear, `SPECVIZ_KERNELS=reference`) or "selected" (the default)."""
    from .errors import ConfigError

    value = os.environ.get(MODE_ENV, "").strip().lower() or "selected"
    if value not in ("reference", "selected"):
        raise ConfigError(f"{MODE_ENV}={value!r}: choose 'reference' (plain nn.Linear) or 'selected' (timed at load)")
    return value


def eligible(module: nn.Module) -> bool:
    """A CPU linear of a dtype oneDNN runs here, large enough to be worth choosing for."""
    if type(module) is not nn.Linear or module.weight.device.type != "cpu":
        return False
    return module.in_features * module.out_features >= MIN_WEIGHTS and onednn_available(module.weight.dtype)


def install_pair(
    pair: Any,
    cache_path: Path | None,
    progress: Progress | None = None,
    models: Iterable[tuple[str, Any, bool]] | None = None,
) -> dict[str, Any]:
    """Choose and install kernels on the pair's target, draft and feature head (in place). Returns
    a summary: per model the storage counts and packed/dropped bytes, and the timings' origin."""
    if models is None:
        # The feature head keeps its plain weights: its proposer reads `fuse.weight` every step.
        models = [
            (role, m, role != "feature_head")
            for role, m in (("target", pair.target), ("draft", pair.draft), ("feature_head", pair.feature_head))
            if m is not None
        ]
    return install(list(models), cache_path, progress)


def install(
    models: list[tuple[str, nn.Module, bool]], cache_path: Path | None, progress: Progress | None = None
) -> dict[str, Any]:
    """`install_pair` for (role, model, may drop plain weights) triples."""
    summary: dict[str, Any] = {"mode": mode(), "machine": machine()[0], "models": {}}
    if summary["mode"] == "reference":
        return summary
    groups: dict[Shape, list[nn.Linear]] = {}
    for _, model, _ in models:
        for module in model.modules():
            if eligible(module):
                groups.setdefault(shape_of(module), []).append(module)
    timings, measured = _timings(groups, cache_path, progress)
    plans = _plans(models, groups, timings)
    dropping: list[torch.Tensor] = []  # plain weights a packed copy replaces (alive until their pages go)
    for role, model, _ in models:
        counts = {"plain": 0, "packed": 0, "both": 0}
        packed_bytes = dropped = 0
        for module in [m for m in model.modules() if id(m) in plans]:
            storage, choice = plans[id(module)]
            counts[storage] += 1
            if storage == "plain" and choice == {m: ("reference", m) for m in choice}:
                continue  # nothing to change: it stays an nn.Linear
            size = shape_of(module).bytes
            packed_bytes += size if storage != "plain" else 0
            dropped += size if storage == "packed" else 0
            if storage == "packed":
                dropping.append(module.weight)
            swap(module, storage, choice)
        summary["models"][role] = {
            **counts,
            "packed_bytes": packed_bytes,
            "dropped_bytes": dropped,
            "extra_bytes": packed_bytes - dropped,
        }
        model.specviz_kernels = summary["models"][role]
    summary["measured_now"] = measured
    summary["released_file_bytes"] = release_file_pages(dropping)
    del dropping
    _return_freed_memory()
    return summary


MADV_DONTNEED = 4  # Linux's madvise advice: drop these pages from the process (a file's are read again if touched)


def release_file_pages(tensors: Iterable[torch.Tensor]) -> int:
    """Hand back the resident pages of dropped weights that live in a model file's mapping; returns
    the bytes handed back. Weights loaded from safetensors are views of the file, mapped privately:
    dropping the tensor frees nothing while the rest of the model keeps the mapping, and the pages
    packing read stay in the process beside the packed copy (+292 MiB for the default pair's float32
    target, measured). Only pages wholly inside a tensor, of a mapping with no privately written page,
    are dropped: their contents are the file's, so a later read, if any, gets the same values back."""
    tensors = list(tensors)
    madvise = getattr(ctypes.CDLL(None), "madvise", None)
    clean = _clean_file_mappings() if tensors and madvise is not None else []
    if not clean:
        return 0
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    page = os.sysconf("SC_PAGE_SIZE")
    released = 0
    for tensor in tensors:
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        low, high = -(-start // page) * page, end // page * page  # whole pages inside the tensor only
        inside = any(a <= start and end <= b for a, b in clean)
        if high > low and inside and madvise(low, high - low, MADV_DONTNEED) == 0:
            released += high - low
    return released


def _clean_file_mappings() -> list[tuple[int, int]]:
    """(start, end) of this process's file-backed mappings without privately written pages
    (/proc/self/smaps; none where it cannot be read)."""
    out: list[tuple[int, int]] = []
    span: tuple[int, int] | None = None
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
            start, _, end = fields[0].partition("-")
            file_backed = len(fields) >= 6 and fields[4] != "0" and fields[5].startswith("/")
            span = (int(start, 16), int(end, 16)) if file_backed else None
        elif span is not None and fields[:1] == ["Anonymous:"]:  # a privately written page is anonymous
            if fields[1] == "0":
                out.append(span)
            span = None
    return out


def _return_freed_memory() -> None:
    """Hand the pages of the dropped plain weights (and of the timing's temporary packed copies)
    back to the OS. glibc keeps freed blocks in its heap (its thresholds rise as large blocks are
    freed), so without a trim the process would hold both copies: +214 MiB for the bfloat16 pair,
    measured. Other C libraries have no `malloc_trim`: nothing to do."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _plans(
    models: list[tuple[str, nn.Module, bool]], groups: dict[Shape, list[nn.Linear]], timings: dict[str, Any]
) -> dict[int, tuple[str, dict[int, str]]]:
    """(storage, choice) per module id. Second copies ("both") are granted per shape, all of its
    layers or none, smallest total first, within `EXTRA_BYTES_SHARE` of the models' bytes."""
    droppable = {id(m) for _, model, may_drop in models if may_drop for m in model.modules()}
    for _, model, _ in models:
        shared = _shared_weights(model)
        droppable -= {id(m) for m in model.modules() if isinstance(m, nn.Linear) and id(m.weight) in shared}
    budget = EXTRA_BYTES_SHARE * sum(_param_bytes(model) for _, model, _ in models)
    plans: dict[int, tuple[str, dict[int, str]]] = {}
    wanted = {
        shape: [decide(timings[shape.key], id(m) in droppable, True) for m in modules]
        for shape, modules in groups.items()
    }
    for shape in sorted(groups, key=lambda s: s.bytes * sum(p[0] == "both" for p in wanted[s])):
        extra = shape.bytes * sum(storage == "both" for storage, _ in wanted[shape])
        allowed = extra <= budget
        budget -= extra if allowed else 0
        for module, plan in zip(groups[shape], wanted[shape]):
            keep = allowed or plan[0] != "both"
            plans[id(module)] = plan if keep else decide(timings[shape.key], id(module) in droppable, False)
    return plans


def _param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _shared_weights(model: nn.Module) -> set[int]:
    """ids of parameters reachable under more than one name (tied embeddings and output heads):
    dropping one would leave the other reading nothing."""
    seen: dict[int, int] = {}
    for _, param in model.named_parameters(remove_duplicate=False):
        seen[id(param)] = seen.get(id(param), 0) + 1
    return {key for key, count in seen.items() if count > 1}


def swap(module: nn.Linear, storage: str, choice: Choice) -> None:
    """Make `module` a SelectedLinear running `choice` (bucket -> kernel) on `storage`: "plain"
    (its weight), "both" (plus a packed copy) or "packed" (the packed copy alone)."""
    if storage != "plain":
        module.packed = pack(module.weight)
    if storage == "packed":
        del module._parameters["weight"]  # the packed copy holds it now (`SelectedLinear.__getattr__`)
    module.__class__ = SelectedLinear
    module.kernels = dispatch_table(choice)


def restore(model: nn.Module) -> None:
    """Undo `install`: every SelectedLinear back to nn.Linear with its plain weight (exact)."""
    for module in model.modules():
        if isinstance(module, SelectedLinear):
            if "weight" not in module._parameters:
                module._parameters["weight"] = nn.Parameter(module.packed.to_dense(), requires_grad=False)
            for name in ("packed", "kernels"):
                module.__dict__.pop(name, None)
            module.__class__ = nn.Linear
    model.__dict__.pop("specviz_kernels", None)


def parameter_count(model: nn.Module) -> int:
    """The model's parameters as loaded: `parameters()` no longer holds a weight whose packed copy
    replaced it, so each such weight is counted by its shape (what the count was before `install`)."""
    dropped = sum(m.in_features * m.out_features for m in model.modules()
                  if isinstance(m, SelectedLinear) and "weight" not in m._parameters)
    return sum(p.numel() for p in model.parameters()) + dropped


def selected_kernels(model: nn.Module) -> dict[str, int]:
    """How many linears of `model` run each candidate, over all buckets (for reports and tests)."""
    names = {fn: n for n, (fn, _) in CANDIDATES.items()}
    counts: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, SelectedLinear):
            for name in {fn.name if isinstance(fn, Padded) else names[fn] for fn in module.kernels}:
                counts[name] = counts.get(name, 0) + 1
    return counts


# ---------------------------------------------------------------- the cache of timings


def machine() -> tuple[str, str]:
    """(description, key) of what kernel timings depend on: the CPU model and its vector ISA (and
    the caps on it in force, `cachedir.isa_caps`), the torch version and its thread count, this
    module's version."""
    model, flags = _cpu()
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16") if f in flags]
    parts = [
        model,
        " ".join(isa) or platform.machine(),
        *([f"capped: {caps}"] if (caps := isa_caps()) else []),
        f"torch {torch.__version__}",
        f"{torch.get_num_threads()} threads",
        f"v{VERSION}",
    ]
    return ", ".join(parts), hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def _cpu() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == (platform.processor() or platform.machine()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return model, flags


def _timings(
    groups: dict[Shape, list[nn.Linear]], cache_path: Path | None, progress: Progress | None
) -> tuple[dict[str, Any], list[str]]:
    """Timings per shape key: from the cache where this machine measured them, else measured now
    (with progress) and written back."""
    description, key = machine()
    cached = _read(cache_path)
    entry = cached.get(key, {"machine": description, "shapes": {}})
    missing = [s for s in groups if s.key not in entry["shapes"]]
    for i, shape in enumerate(missing):
        if progress is not None:
            progress(
                f"Timing matrix kernels for this CPU (once): {shape.key}, {len(groups[shape])} layers", i / len(missing)
            )
        with _packed_for_timing(groups[shape]):
            timed = time_shape(groups[shape], CANDIDATES)
        entry["shapes"][shape.key] = {n: {str(m): v for m, v in by.items()} for n, by in timed.items()}
    if missing and progress is not None:
        progress(f"Matrix kernels timed for this CPU ({len(missing)} shapes)", 1.0)
    if missing and cache_path is not None:
        cached[key] = entry
        _write(cache_path, cached)
    shapes = {k: {n: {int(m): v for m, v in by.items()} for n, by in t.items()} for k, t in entry["shapes"].items()}
    return shapes, [s.key for s in missing]


class _packed_for_timing:
    """Packed copies on the layers `time_shape` will use, for the time of the timing only."""

    def __init__(self, modules: list[nn.Linear]) -> None:
        self.modules = modules[: max(1, COLD_BYTES // max(1, shape_of(modules[0]).bytes))]

    def __enter__(self) -> None:
        for module in self.modules:
            module.packed = pack(module.weight)

    def __exit__(self, *exc: object) -> None:
        for module in self.modules:
            module.__dict__.pop("packed", None)


def _read(path: Path | None) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path is not None and path.is_file() else {}
    except (OSError, ValueError):
        return {}  # unreadable: measure again and overwrite it


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
