"""A student's page in a live lecture: the stage, fed by the room.

One renderer: as the standalone run page is the stage fed by a file (`standalone`), the follower's
page is the same stage core (`stage_js.core_js`) fed by the lecture's room (`ui/live_route`): the
same step data, the same patching and motion. Its glue (`static/follower.js`) joins the room,
keeps its student key in the tab's session storage (a reload rejoins as the same student; the
address carries only the public room code), and long-polls the room: following, every step the
lecturer shows is shown here; a student may step back and forward through the room's steps
(branched: the page says how far behind the lecturer it is) and **Follow** (key F) snaps back.
At a poll the question and its options appear under the stage; after the reveal, the class's
counts, your answer and the truth. A link opens a fork of the lecture's run at the cycle on screen
in the app, on the student's own decoder (`ui/fork`). Under them, tabs open the app's other views for the step on
screen (`follower_views`: Distributions, Statistics, Misconceptions); an open tab follows the
stage, whether it follows the lecturer or the student went back.

No external resources: styles and scripts are inlined, as on the standalone page, but for the
plotly.js that draws the charts, which the live route serves from the installed `plotly` package
and the page loads only when a tab of charts is first opened (4.8 MB: not for a student who never
opens one).
"""

from __future__ import annotations

from . import stage_js
from .follower_views import myths_html
from .kv_html import stylesheet
from .markup import attrs, esc, tag

# The tabs under the stage: (the view's name, its label); "" is the stage alone.
TABS = (("", "Stage only"), ("charts", "Distributions"), ("stats", "Statistics"), ("myths", "Misconceptions"))


def _head(title: str) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)} — specviz</title>"
            f"<style>{stage_js.read_static('standalone.css')}{stage_js.read_static('follower.css')}"
            f"{stage_js.stage_css()}</style>{stylesheet()}</head>")


def page_html(code: str, path: str, plotly: str = "", app: str = "/") -> str:
    """The follower's page for room `code`, posting to `path` (its own address); `plotly`: where the
    live route serves plotly.js; `app`: the app's own page (a student's fork opens there, `ui/fork`)."""
    script = (stage_js.core_js() + stage_js.read_static("follower.js")).replace("</script", "<\\/script")
    return (
        _head(f"Live lecture {code}") +
        f"<body{attrs(data_room=code, data_path=path, data_plotly=plotly, data_app=app)}>"
        "<header><button id='back' aria-label='Back one step'>← Back</button>"
        "<button id='next' aria-label='Next step'>Next →</button>"
        "<button id='follow' class='primary' aria-keyshortcuts='F' hidden>Follow the lecturer (F)</button>"
        "<span id='where' aria-live='polite'>Joining…</span>"
        f"<span class='room'>Live lecture <b>{esc(code)}</b></span></header>"
        "<main><div id='stage'></div><section id='poll' aria-live='polite' hidden></section>" + _try() + _tabs() +
        "<p class='nojs-note'>This page needs JavaScript to follow the lecture.</p></main>"
        f"<script type='module'>{script}</script></body></html>"
    )


def _try() -> str:
    """The link to a fork of the lecture's run at the cycle on screen (its address set by the script)."""
    link = tag("a", "Try this cycle yourself ↗", id="fork", target="_blank", rel="noopener")
    return tag("p", link + tag("span", " on a decoder of your own: the lecture's text so far, your own random draws"),
               cls="svf-try", hidden=True)


def _tabs() -> str:
    """The other views' tabs (buttons: Tab reaches them, Enter opens one, ← → move between them), the
    panel they open and the misconceptions' text (the same at every step: sent once, with the page)."""
    tabs = "".join(tag("button", esc(label), type="button", role="tab", id=f"tab-{name or 'stage'}", data_tab=name,
                       aria_selected="true" if not name else "false", aria_controls="views")
                   for name, label in TABS)
    return (tag("nav", tabs, cls="svf-tabs", role="tablist", aria_label="More views of this step") +
            tag("section", "", id="views", role="tabpanel", aria_labelledby="tab-stage", tabindex=-1, hidden=True) +
            tag("template", myths_html(), id="myths"))


def join_html(path: str, error: str = "") -> str:
    """The page that asks for a room's code (with why the last one did not open, if it did not)."""
    note = f"<p class='error' role='alert'>{esc(error)}</p>" if error else ""
    return (
        _head("Join a live lecture") + "<body><main class='join'><h1>Join a live lecture</h1>" + note +
        f"<form method='get'{attrs(action=path)}>"
        "<label for='code'>The room's code, as shown on the lecturer's screen</label>"
        "<input id='code' name='code' autocomplete='off' autocapitalize='characters' maxlength='16' required "
        "placeholder='e.g. K7QP2'><button type='submit' class='primary'>Join</button></form></main></body></html>"
    )
