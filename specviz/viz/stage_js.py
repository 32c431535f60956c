"""The stage's browser code, as text: one source for the app's component and the standalone page.

The browser steps through a run's phases itself (docs/design.md §3, "The stage"): `static/stage.js`
holds the core (`createStage`: patch the picture in place with morphdom, FLIP the nodes that moved,
queue clicks the server must answer), `static/stage_app.js` the Streamlit glue (a components-v2
default export), and the standalone run page (`viz/standalone.py`) adds its own few lines of glue.
morphdom (MIT, vendored unmodified with its licence in `static/`) does the DOM patching: matching
nodes by key across two trees is a solved problem, and a hand-written copy would be a second one.
fflate (MIT, its minified UMD build vendored the same way) inflates the payload's deflated bodies
synchronously, in the call that brings them (the browser's own `DecompressionStream` is
asynchronous: on a busy page each of its hops waits behind other work).

A component's JavaScript is loaded from a Blob URL, where relative imports do not resolve, so the
module is one string: fflate's UMD build run in a closure that hands back its exports (it sets
`self.fflate`, here a local object: no global is touched), morphdom's ES module without its
`export default` line, then the core, then the glue. Nothing here imports Streamlit.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
_MORPHDOM_EXPORT = "export default morphdom;"


@cache
def read_static(name: str) -> str:
    """A file of static/ (the browser code and stylesheets), read once."""
    return (STATIC / name).read_text(encoding="utf-8")


@cache
def core_js() -> str:
    """fflate and morphdom (as names in the module's scope) and the stage core."""
    morphdom = read_static("morphdom.js")
    if _MORPHDOM_EXPORT not in morphdom:
        raise RuntimeError("static/morphdom.js is not morphdom's ES module build")
    # fflate's UMD wrapper assigns `self.fflate`: a local `self` keeps it out of the page's globals.
    fflate = read_static("fflate.js")
    fflate = "const svFflate = (function () { const self = {};\n" + fflate + "\nreturn self.fflate; })();"
    # The token-tree panel's linked highlight rides along (viz/tree_view.py draws the panel).
    return "\n".join((fflate, morphdom.replace(_MORPHDOM_EXPORT, ""), read_static("stage.js"), read_static("tree.js")))


@cache
def app_js() -> str:
    """The component's module: the core plus the Streamlit glue (its default export)."""
    return core_js() + "\n" + read_static("stage_app.js")


@cache
def stage_css() -> str:
    return read_static("stage.css") + "\n" + read_static("tree.css")  # the token-tree panel's styles too
