"""One escaping path for every piece of markup the views build (docs/design.md §3, "The trust boundary").

The views (`kv_html`, `tree_view`, `tokens`, `stage_data`, `standalone`, …) build HTML as strings,
and the stage's script puts it into the page with `innerHTML` (morphdom). Whatever a view
interpolates may have come from a run file someone else wrote, so every value goes through `esc`
on its way in, text and attribute values alike, numbers included: the schema (`run_schema`) makes
a file's integers integers, but a view escapes anyway (defence in depth: one missed check must not
be enough to run a script in a classroom's pages).

    f"<div class='svkv-row' data-row='{esc(row)}'>{esc(label)}</div>"
    tag("span", esc(text), cls="svkv-tok", data_key=f"t-s{slot}")   # the same, built

Attribute values are always quoted (single quotes here; `esc` escapes both kinds), so a value
cannot end its attribute. Markup built by another builder is passed through as it is (it was
escaped when it was built); nothing else is. Plotly draws its own subset of HTML in labels and
shows `&quot;` literally, so its labels take `label` (`< > &` only).
"""

from __future__ import annotations

import html


def esc(value: object) -> str:
    """`value` as text safe in an element or a quoted attribute: `& < > " '` escaped. A number is
    formatted first and then escaped like any text (a value that claims to be a number may not be)."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def label(value: object) -> str:
    """Text for a plotly label (`< > &` escaped; plotly shows entity-escaped quotes literally)."""
    text = value if isinstance(value, str) else str(value)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def attrs(**values: object) -> str:
    """Attributes, each value escaped and quoted: `cls` is `class`, `_` in a name is `-`, a value of
    None or False leaves the attribute out, True writes it bare."""
    out = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        name = "class" if name == "cls" else name.replace("_", "-")
        out.append(f" {name}" if value is True else f" {name}='{esc(value)}'")
    return "".join(out)


def tag(name: str, inner: str = "", **values: object) -> str:
    """`<name attrs>inner</name>`: `inner` is markup already built (escape text with `esc` first)."""
    return f"<{name}{attrs(**values)}>{inner}</{name}>"
