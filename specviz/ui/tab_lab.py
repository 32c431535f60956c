"""The exactness lab's tab (`specviz.lab`): N samples each way from the context at the start of the
cycle shown, compared with the exact p (live runs only: it needs the models).
"""

from __future__ import annotations

import dataclasses

import streamlit as st

from ..errors import SpecvizError
from ..lab import run_exactness_lab
from ..server import ServerSettings
from ..viz import exactness
from .session import decoding_slot, workspace
from .state import Run, committed_ids
from .tab_charts import PLOT


def lab_tab(run: Run, cycle: int | None) -> None:
    st.markdown("Sample **N** next tokens with the speculative decoder and **N** with the target alone, from "
                "the context at the start of the cycle shown, and compare both with the exact p. Exactness "
                "means the speculative sampler's TV distance to p shrinks like 1/√N, exactly like the target's.")
    if run.pair is None:
        st.info("This run is a recording (no model is loaded): the lab needs a live run.")
        return
    c1, c2 = st.columns([1, 3])
    settings = ServerSettings.load()
    cap = settings.limits.lab_n
    n = c1.number_input(
        "N samples", min(10, cap), cap, value=min(60, cap), step=10, key="lab_n",
        help="Each sample runs a fresh decoder from the context (both models prefill it), so on a "
        "2-core CPU the default pair takes about a second per speculative + target-only pair.",
    )  # fmt: skip
    if c2.button("Run the exactness lab", key="lab_run"):
        bar = st.progress(0.0, text="sampling…")
        try:
            settings.check_lab_n(int(n))
            with decoding_slot():
                config = run.dec.config if run.dec is not None else run.config
                res = run_exactness_lab(run.pair, committed_ids(run, cycle), config, int(n),
                                        progress=lambda f, msg: bar.progress(min(f, 1.0), text=msg))
        except SpecvizError as exc:
            st.error(str(exc))
        else:
            ws = workspace()
            with ws.lock:
                ws.run = run = dataclasses.replace(ws.run, lab=res)
        bar.empty()
    if (res := run.lab) is not None:
        st.plotly_chart(exactness.lab_figure(res), key="lab_fig", **PLOT)
        st.caption(f"TV at N = {res.n}: speculative {res.tv_spec[-1]:.3f}, target only {res.tv_target[-1]:.3f}.")
