"""Export: the run file (JSON, `specviz.runfile`: opens in any specviz with no model loaded), the
standalone run page (HTML, `specviz.viz.standalone`: every phase, stepped offline) and the current
figures (HTML, plotly.js embedded once). The download callables run only when a button is clicked,
possibly outside this script run: they close over plain values and never touch `st.session_state`.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ..runfile import record_run
from ..viz import standalone
from .runs import record_fields
from .state import Run
from .tab_charts import cycle_figures


def export_tab(run: Run, cycle: int | None, phase: str) -> None:
    fields = record_fields(run)
    tr = run.traces[cycle] if cycle is not None and phase != "start" else None
    shown = cycle_figures(tr, phase, st.session_state.get("dist_pos")) if tr is not None else {}
    c1, c2, c3 = st.columns(3)
    run_file_button(c1, "Run file (JSON)", "dl_json", fields, disabled=not run.traces)
    c2.download_button(
        "Standalone run page (HTML)", data=lambda: standalone.run_html(record_run(**fields)),
        file_name="specviz-run.html", mime="text/html", key="dl_run_html", on_click="ignore", disabled=not run.traces,
        help="Every phase of every cycle, with its own Next/Back buttons: no server, no Python, works offline.",
    )  # fmt: skip
    c3.download_button(
        "Current figures (HTML)", data=lambda: figures_html(shown), file_name="specviz-figures.html",
        mime="text/html", key="dl_html", on_click="ignore", disabled=not shown,
        help="The charts of the cycle and phase shown (step into a cycle first).",
    )  # fmt: skip
    st.caption("The run file and the run page hold every token's text, so they need no tokenizer; the figures "
               "page embeds plotly.js. All three work offline.")


def run_file_button(where: Any, label: str, key: str, fields: dict[str, Any], disabled: bool = False) -> None:
    """A download button for the run file; the record is built from `fields` (specviz.ui.runs.
    record_fields) only when the button is clicked."""
    where.download_button(
        label, data=lambda: record_run(**fields).to_json(), file_name="specviz-run.json", mime="application/json",
        key=key, on_click="ignore", disabled=disabled,  # downloading changes nothing: no rerun
        help="Opens in any specviz (sidebar: Open a run file) with no model loaded.",
    )  # fmt: skip


def figures_html(figs: dict[str, Any]) -> str:
    """The figures on screen as one standalone HTML page (plotly.js embedded once)."""
    body = "".join(f"<h3>{name}</h3>" + fig.to_html(full_html=False, include_plotlyjs=(i == 0), auto_play=False)
                   for i, (name, fig) in enumerate(figs.items()))
    return ("<html><head><meta charset='utf-8'><title>specviz figures</title></head>"
            f"<body style='font-family:sans-serif;max-width:1200px;margin:auto'>{body}</body></html>")
