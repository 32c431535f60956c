"""Precision: which number format the pair runs in, and what "equal" means in it (docs/design.md §4).

float32 (24 significant bits) is the default, the clearest exactness demo; bfloat16 (8 bits) halves
the memory and runs faster where the GPU or CPU has bfloat16 matrix units. Exactness is relative to
the model as run: a bfloat16 run samples exactly from the bfloat16 target. Only rounding changes, so
the invariant's max |ΔK/V| (the same K/V computed in other shapes) is never exactly 0; each dtype has
one tolerance (`invariant_tolerance`) above its rounding and far below a bookkeeping bug, a cache one
token off. This module imports no torch: the views use it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

DTYPES = ("float32", "bfloat16")  # offered by the app and the CLI; float32 first: the default
DEFAULT_DTYPE = "float32"
ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
# max |ΔK/V| between a cache and a fresh prefill that is still rounding, per dtype (see above): every
# format `load_pair` accepts (also a GPU's float16, float64 for checks); the app offers DTYPES only.
INVARIANT_TOLERANCE = {"float32": 1e-3, "bfloat16": 1.0, "float16": 0.1, "float64": 1e-9}


def dtype_name(dtype: Any) -> str:
    """The canonical name of a dtype given as a string ("bf16", "torch.bfloat16") or a torch dtype.

    Raises ConfigError naming the choices for anything else."""
    raw = str(dtype).strip()
    name = raw.removeprefix("torch.").lower()
    name = ALIASES.get(name, name)
    if name not in INVARIANT_TOLERANCE:
        raise ConfigError(f"unknown precision {raw!r}: choose one of {', '.join(DTYPES)} (or float16 on a GPU); "
                          "aliases fp32, bf16 and torch dtypes are accepted too")
    return name


def invariant_tolerance(dtype: Any) -> float:
    """The largest max |ΔK/V| of the invariant check that is rounding, not a bug, in `dtype`."""
    return INVARIANT_TOLERANCE[dtype_name(dtype)]


def invariant_holds(diffs: Mapping[str, float], dtype: Any) -> bool:
    return max(diffs.values(), default=0.0) <= invariant_tolerance(dtype)


def invariant_words(diffs: Mapping[str, float], dtype: Any, names: Mapping[str, str] | None = None) -> str:
    """One sentence for the invariant check's numbers, judged by the dtype's tolerance, e.g.
    'target 2.5e-01, draft 0.0e+00 — within bfloat16's tolerance 1.0 (rounding, not a bug)'."""
    name = dtype_name(dtype)
    tol = invariant_tolerance(name)
    values = ", ".join(f"{(names or {}).get(role, role)} {value:.1e}" for role, value in diffs.items())
    if invariant_holds(diffs, name):
        return f"{values} — within {name}'s tolerance {tol:g} (rounding, not a bug)"
    return f"{values} — **above {name}'s tolerance {tol:g}: the cache differs from a fresh prefill**"


def run_dtype(*models: Any) -> str:
    """The precision a run is judged in: the lowest of the given models' (None skipped), so a
    float32 target with a bfloat16 draft is judged as bfloat16. A model without parameters (or no
    model) counts as float32."""
    firsts = (next(iter(model.parameters()), None) for model in models if model is not None)
    names = [DEFAULT_DTYPE, *(dtype_name(first.dtype) for first in firsts if first is not None)]
    return max(names, key=INVARIANT_TOLERANCE.__getitem__)
