"""The browser's files (static/: scripts and stylesheets), read once. No other import, so every
module that draws for the browser can read them (kv_html its stylesheet, stage_js the stage's code)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


@cache
def read_static(name: str) -> str:
    """A file of static/ (the browser code and stylesheets), read once."""
    return (STATIC / name).read_text(encoding="utf-8")
