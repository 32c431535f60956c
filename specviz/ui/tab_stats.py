"""The statistics tab: acceptance, speed and time per cycle of the revealed cycles (`specviz.stats`;
forced cycles listed but left out). The theory uses the measured verify cost v(K), so "measured below
theory" is explained on screen; the baseline is the same target, plain, on the same prompt.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import streamlit as st

from .. import narrative
from ..stats import acceptance_stats, cycle_costs, cycle_rows, measured_speedup
from ..viz import statistics
from . import quiz
from .session import act, decoding_slot
from .state import Run
from .tab_charts import PLOT

THEORY_CAPTION = ("Expected tokens per cycle (1 − α^(K+1))/(1 − α) and speedup (1 − α^(K+1))/((1 − α)(K·c + 1)) "
                  "(Leviathan et al. 2023), with α measured here and c = draft time per forward / target verify time "
                  "from the traces' timings. v(K) is the measured verify pass in plain decoding steps (verify ms ÷ "
                  "the baseline's ms per token): the textbook's \"+ 1\" assumes it is 1. The measured speedup "
                  "compares wall time per committed token with a plain autoregressive run of the same target.")


LAW_CAPTION = ("K drafts commit E(K) = 1 + Σ_{i≤K} Π_{j≤i} a_j tokens per cycle and cost T(K) = K·c + v(K+1) plain "
               "steps; auto picks the K (0 = a plain step) with the largest E(K)/T(K), leaving the plain step only "
               "for a predicted gain over 3 %. v(N) and c were measured when the pair was loaded; a_j is the "
               "acceptance at depth j seen in this run, blended with a prior from the proposer's benchmark.")


def stats_tab(run: Run) -> None:
    done = list(run.traces[: run.cycles_shown])
    st_ = acceptance_stats(done)
    if not done:
        st.info("Statistics appear once a cycle has been stepped through to its rollback.")
    elif st_.cycles == 0:
        st.info("Every revealed cycle so far was forced (what-if): statistics count exact cycles only.")
    else:
        report = measured_speedup(done, run.baseline_ms_per_token)
        _metrics(st_, report)
        if st_.chain_cycles:  # α, its histogram and the theory describe chains (specviz.stats)
            st.plotly_chart(statistics.stats_figure(st_, report), key="stats_fig", **PLOT)
        st.plotly_chart(statistics.speedup_figure(report), key="speedup_fig", **PLOT)
        st.markdown(narrative.explain_speedup(report))
        plain = (f" {st_.plain_cycles} cycle(s) proposed nothing (plain target steps): they test no draft and "
                 "enter the theory by their share of the cycles.") if st_.plain_cycles else ""
        trees = (f" {st_.tree_cycles} token-tree cycle(s) verified {st_.tree_nodes} nodes and accepted "
                 f"{st_.tree_path_tokens} path tokens: a tree's nodes are alternatives, not drafts in a row, so they "
                 "stay out of α and the histogram; their figure is tokens per verify pass.") if st_.tree_cycles else ""
        st.caption(THEORY_CAPTION + plain + trees)
    _law_section(run, done)
    if done:
        time_fig = statistics.cycle_time_figure(cycle_costs(done), run.baseline_ms_per_token)
        st.plotly_chart(time_fig, key="time_fig", **PLOT)
        if st_.forced_cycles:
            st.caption(f"{st_.forced_cycles} what-if cycle(s) were forced: they are listed and hatched, but left "
                       "out of the acceptance rate, the histogram, the theory and the speedup.")
        st.markdown("**Cycle history**")
        st.dataframe(cycle_rows(done), hide_index=True, width="stretch")
    if run.quiz:
        right, asked = quiz.tally(run.quiz)
        st.markdown(f"**Quiz**: {right} of {asked} predictions right over {len(run.quiz)} cycle(s).")
    if run.live:
        st.button("Run the autoregressive baseline (same target, same prompt)", key="baseline", on_click=on_baseline)
    if run.baseline_ms_per_token:
        st.caption(f"Baseline: {run.baseline_ms_per_token:.1f} ms per token over {run.baseline_tokens} tokens.")


def _law_section(run: Run, done: list) -> None:
    """The machine's cost law (docs/design.md §1, "How many drafts"): v(N), the break-even acceptance
    per K against the acceptance seen, the expected speedup per K and what auto chose."""
    law = run.law
    if law is None:
        st.caption("This run file carries no cost law (recorded before specviz measured one).")
        return
    whose = "the recording machine's" if run.cost_law is not None else "this machine's"
    st.markdown(f"**The cost law** — {whose}")
    st.plotly_chart(statistics.law_figure(law, run.proposer, done), key="law_fig", **PLOT)
    st.markdown(narrative.explain_law(law, run.proposer, done))
    st.caption(LAW_CAPTION)


def _metrics(st_: Any, report: Any) -> None:
    c1, c2, c3, c4, c5 = st.columns(5)
    if st_.tree_cycles:  # token trees: tokens per verify pass is the figure (specviz.stats)
        c1.metric("Tokens per verify pass", f"{st_.tokens_per_cycle:.2f}")
        c2.metric("Tree nodes per pass", f"{st_.tree_nodes / st_.tree_cycles:.1f}")
        c3.metric("Accepted path length", f"{st_.tree_path_tokens / st_.tree_cycles:.2f}")
    else:  # α needs a tested draft: a history of plain steps only (lookup without a match) has none
        c1.metric("Acceptance rate α", f"{st_.alpha:.3f}" if st_.tested else "—")
        c2.metric("Tokens per cycle", f"{st_.tokens_per_cycle:.2f}")
        c3.metric("Theory: E[tokens/cycle]", f"{report.expected_tokens_per_cycle:.2f}")
    cost = f"{report.verify_cost:.2f} steps" if report.verify_cost is not None else "—"
    c4.metric(f"Verify cost v({'N' if st_.tree_cycles else 'K'})", cost)
    c5.metric("Measured speedup", f"{report.measured_speedup:.2f}×" if report.measured_speedup else "—")


def on_baseline() -> None:
    import specviz

    def run(r: Run) -> Run:
        n = max(8, min(64, sum(len(t.emitted) for t in r.traces)))  # tokens to time (fewer if the text ends)
        cfg = r.dec.config.replace(forced_outcomes=(), max_new_tokens=min(n, r.dec.config.max_new_tokens))
        ar = specviz.AutoregressiveDecoder(r.pair.target, cfg, tokenizer=r.pair.tokenizer)
        with decoding_slot():
            ar.start(list(r.prompt_ids))
            t0 = time.perf_counter()
            steps = len(ar.generate())
            ms = (time.perf_counter() - t0) * 1000 / max(steps, 1)
        return dataclasses.replace(r, baseline_ms_per_token=ms, baseline_tokens=steps)

    act(run)
