"""The stage's browser code, as text: one source for the app's component, the standalone page and
a live lecture's follower page.

The browser steps through a run's phases itself (docs/design.md §3, "The stage"). The core is split
by job into small files of `static/` (`CORE`: patching and motion, painting a step's parts, messages
to the server, the timeline, the keys, and `stage.js`'s `createStage`), run in one scope; a step's
parts are declared once, in Python (`stage_data.PARTS`), and reach the core as its table `SV_PARTS`
(`parts_js`), with the timeline's phases per cycle (`PHASES`, `specviz.timeline`). `static/stage_app.js`
is the Streamlit glue (a components-v2 default export); the standalone run page (`viz/standalone.py`)
and the follower page (`viz/follower.py`) add their own glue.

morphdom (MIT, vendored unmodified with its licence in `static/`) does the DOM patching: matching
nodes by key across two trees is a solved problem, and a hand-written copy would be a second one.
fflate (MIT, its minified UMD build vendored the same way) inflates the payload's deflated bodies
synchronously, in the call that brings them (the browser's own `DecompressionStream` is
asynchronous: on a busy page each of its hops waits behind other work).

A component's JavaScript is loaded from a Blob URL, where relative imports do not resolve, so the
module is one string: fflate's UMD build run in a closure that hands back its exports (it sets
`self.fflate`, here a local object: no global is touched), morphdom's ES module without its
`export default` line, the parts table, then the core's files, then the glue. Nothing here imports
Streamlit.
"""

from __future__ import annotations

import json
from functools import cache

from ..timeline import PHASES_PER_CYCLE
from . import stage_data
from .static_files import read_static

_MORPHDOM_EXPORT = "export default morphdom;"
# The stage core, by job, in the order it is run (docs/design.md §3, "The stage"; stage.js says which is which).
CORE = ("stage_motion.js", "stage_paint.js", "stage_transport.js", "stage_timeline.js", "stage_keys.js", "stage.js")


def parts_js() -> str:
    """What the core knows of the server's data: a step's parts (`stage_data.PARTS`, as the browser
    reads them) and the steps per cycle. Read at every call: a part added is in the next page."""
    parts = json.dumps([p.spec() for p in stage_data.PARTS], ensure_ascii=False)
    return f"const SV_PARTS = {parts};\nconst PHASES = {PHASES_PER_CYCLE};  // steps per cycle (specviz.timeline)\n"


@cache
def _libraries() -> str:
    """fflate and morphdom, as names in the module's scope."""
    morphdom = read_static("morphdom.js")
    if _MORPHDOM_EXPORT not in morphdom:
        raise RuntimeError("static/morphdom.js is not morphdom's ES module build")
    # fflate's UMD wrapper assigns `self.fflate`: a local `self` keeps it out of the page's globals.
    fflate = read_static("fflate.js")
    fflate = "const svFflate = (function () { const self = {};\n" + fflate + "\nreturn self.fflate; })();"
    return fflate + "\n" + morphdom.replace(_MORPHDOM_EXPORT, "")


@cache
def _core() -> str:
    # The token-tree panel's linked highlight rides along (viz/tree_view.py draws the panel).
    return "\n".join(read_static(name) for name in (*CORE, "tree.js"))


def core_js() -> str:
    """fflate and morphdom, the parts table and the stage core: what every page that shows a stage runs."""
    return "\n".join((_libraries(), parts_js(), _core()))


def app_js() -> str:
    """The component's module: the core plus the Streamlit glue (its default export)."""
    return core_js() + "\n" + read_static("stage_app.js")


@cache
def stage_css() -> str:
    return read_static("stage.css") + "\n" + read_static("tree.css")  # the token-tree panel's styles too
