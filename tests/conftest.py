"""Shared fixtures: tiny random-config causal LMs (see tiny_models.py), built once per session."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tiny_models import ARCHS, tiny_model

# Tiny models run fastest on one thread; with more, a loaded 2-core machine spends its time
# switching threads (measured: 120 ms vs 22 ms per exactness run).
torch.set_num_threads(1)


@functools.cache
def _cached_tiny_model(arch: str, vocab_size: int, seed: int):
    return tiny_model(arch, vocab_size=vocab_size, seed=seed)


@pytest.fixture(scope="session")
def make_tiny_model():
    """`make_tiny_model(arch, vocab_size=64, seed=0)` -> a cached tiny model (do not mutate it)."""

    def make(arch: str = "llama", vocab_size: int = 64, seed: int = 0):
        return _cached_tiny_model(arch, vocab_size, seed)

    return make


@pytest.fixture(scope="session", params=ARCHS)
def tiny_lm(request, make_tiny_model):
    """Each tiny architecture in turn: llama (GQA), qwen2 (GQA), gpt2."""
    return make_tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_llama(make_tiny_model):
    return make_tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_qwen2(make_tiny_model):
    return make_tiny_model("qwen2")


@pytest.fixture(scope="session")
def tiny_gpt2(make_tiny_model):
    return make_tiny_model("gpt2")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """`streamlit run app.py` with the tiny random pair on a free port, one per browser-test module (a
    module that needs another pair defines its own `server`); its base address."""
    from bench.load import start_server, stop_server

    proc, url = start_server("tiny", ready_s=90)
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's headless Chromium through Playwright, for one browser-test module (its screenshots go
    to test-artifacts/browser/)."""
    from playwright.sync_api import sync_playwright

    from bench.load import CHROMIUM, CHROMIUM_ARGS

    (Path(__file__).resolve().parent.parent / "test-artifacts" / "browser").mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
