"""Where specviz keeps what it computes once per machine (converted models, the kernels chosen for
this CPU, `kernels`; this machine's cost law, `costlaw`), and the CPU those are measured on. One place,
so the modules that write there need not import each other (`models` loads pairs and calls both)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def env_path(variable: str, default: Path) -> Path:
    """The path an environment variable names (``~`` expanded), else `default`."""
    return Path(os.environ[variable]).expanduser() if os.environ.get(variable) else default


def cache_dir() -> Path:
    """The user cache specviz writes into (``$SPECVIZ_CACHE_DIR`` overrides; else ``$XDG_CACHE_HOME/specviz``)."""
    return env_path("SPECVIZ_CACHE_DIR", env_path("XDG_CACHE_HOME", Path.home() / ".cache") / "specviz")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo; `platform` where there is none): a per-machine cache's key,
    and the name benchmarks print beside every figure."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The instruction-set caps the matrix libraries honour: with them an AVX-512 machine runs the code an
# AVX2-only CPU would (ATen's vectorised kernels, oneDNN's primitives, MKL's sgemm), so timings made
# under a cap belong to that cap, not to the machine.
ISA_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_caps() -> str:
    """The caps in force, as "NAME=value" words ("" when none is set)."""
    return " ".join(f"{name}={os.environ[name]}" for name in ISA_CAPS if os.environ.get(name))
