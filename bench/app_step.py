"""Section 3 — app step latency: one cycle plus every figure the app builds for it.

A click in the app that needs a new cycle runs `SpeculativeDecoder.step()` (instrumented: the app
shows snapshots, top-N lists and token texts) and then rebuilds the page's figures from the
traces (app.py `main_view`, `dist_view`, `stats_tab`). Here each cycle is followed by building
the *superset* the app builds for a cycle's last phase, where every figure is on screen:

  token strip (chips + HTML), the phase narrative (every phase), the KV view (`kv_html`: both
  caches at the last phase, animated from the phase before: the HTML the page inserts),
  proposals, acceptance, p-vs-q at the rejected position, the residual or bonus distribution,
  and the statistics and speedup figures over the whole history.

That is the step latency (the goal: < 300 ms median at K = 4). Serialising the plotly figures to
JSON (what Streamlit sends to the browser) is timed separately (the KV view is HTML already); the
browser's rendering is not (bench/browser_latency.py times that). So is rebuilding the same
figures from plain dicts with plotly's validation off, which bounds what a dict-based viz would
cost.
Configuration as the app's defaults: paged cache, page size 16, policy "free", temperature 1.
"""

from __future__ import annotations

import time
from typing import Any

import plotly.graph_objects as go

from specviz import SpeculativeDecoder, narrative
from specviz.stats import acceptance_stats, measured_speedup
from specviz.trace import CYCLE_PHASES
from specviz.viz import acceptance, distributions, kv_html, proposals, statistics, tokens

from .common import Log, Settings, summary
from .systems import spec_config


def build_figures(prompt: list[int], traces: list, token_text: Any, baseline_ms: float | None) -> tuple[dict, dict]:
    """Every figure of the app for the last cycle of `traces`; returns (figures, ms per figure)."""
    tr = traces[-1]
    cycle = len(traces) - 1
    figs: dict[str, Any] = {}
    ms: dict[str, float] = {}
    errors: list[str] = []

    def timed(name: str, fn: Any) -> Any:
        # A figure that raises is a bug in the app too; count it (the report lists it) and go on,
        # so one broken figure does not lose the whole suite.
        t0 = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            out = None
        ms[name] = ms.get(name, 0.0) + 1000 * (time.perf_counter() - t0)
        return out

    timed("token_strip", lambda: tokens.strip_html(tokens.strip_chips(prompt, traces, token_text, cycle, "rollback")))
    timed("narrative", lambda: [narrative.phase_markdown(tr, ph) for ph in CYCLE_PHASES])
    # The KV view of the cycle's last phase, against the phase before (its action rows), as the stage draws it
    # (app.py inserts the stylesheet once per page, so each click builds the picture without it).
    timed("kv_cache", lambda: kv_html.kv_stage_html(  # HTML, not a plotly figure: nothing to serialise
        tr.snapshot("rollback"), tr.snapshot("resolve"), token_text, trace=tr, phase="rollback", proposer=tr.proposer,
        inline_css=False))
    figs["proposals"] = timed("proposals", lambda: proposals.proposals_figure(tr))
    figs["acceptance"] = timed("acceptance", lambda: acceptance.acceptance_figure(tr, tested=True))
    figs["p_vs_q"] = timed("p_vs_q", lambda: distributions.pq_figure(tr, tr.rejected_at or 1))
    figs["resolve"] = timed("resolve", lambda: distributions.residual_figure(tr) if tr.rejected_at
                            else distributions.bonus_figure(tr))

    def stats() -> tuple:
        st = acceptance_stats(traces)
        report = measured_speedup(traces, baseline_ms)
        return statistics.stats_figure(st, report), statistics.speedup_figure(report)

    figs["stats"], figs["speedup"] = timed("statistics", stats) or (None, None)
    if errors:
        figs["_errors"] = errors
    return {k: v for k, v in figs.items() if v is not None}, ms


def run_k(pair: Any, prompts: list[list[int]], k: int, s: Settings, baseline_ms: float | None) -> dict[str, Any]:
    cfg = spec_config(k, 1, 4096, "paged", True, page_size=16, free_policy="free")
    rows: list[dict[str, float]] = []
    errors: list[str] = []
    p = 0
    dec = None
    traces: list = []
    warm = 2  # the first cycles pay one-off costs (allocations, plotly's first figure)
    while len(rows) < s.app_cycles + warm:
        if dec is None or dec.finished:
            dec = SpeculativeDecoder(pair, cfg)
            prompt = prompts[p % len(prompts)]
            p += 1
            dec.start(prompt)
            traces = []
        t0 = time.perf_counter()
        traces.append(dec.step())
        t1 = time.perf_counter()
        figs, fig_ms = build_figures(prompt, traces, dec.token_text, baseline_ms)
        t2 = time.perf_counter()
        errors += figs.pop("_errors", [])
        for fig in figs.values():
            fig.to_json()
        t3 = time.perf_counter()
        # What the same figures cost to build without plotly's per-property validation: the floor
        # of a viz that assembles plain dicts and calls go.Figure(..., _validate=False) once.
        specs = [fig.to_dict() for fig in figs.values()]
        t4 = time.perf_counter()
        for spec in specs:
            go.Figure(spec, _validate=False)
        t5 = time.perf_counter()
        rows.append({"cycle_ms": 1000 * (t1 - t0), "figures_ms": 1000 * (t2 - t1), "step_ms": 1000 * (t2 - t0),
                     "serialize_ms": 1000 * (t3 - t2), "unvalidated_figures_ms": 1000 * (t5 - t4),
                     **{f"fig_{n}": v for n, v in fig_ms.items()}})
    rows = rows[warm:]
    out: dict[str, Any] = {key: summary([r[key] for r in rows]) for key in rows[0]}
    out["figure_errors"] = {"count": len(errors), "distinct": sorted(set(errors))[:10]}
    return out


def run(pair: Any, prompts: list[list[int]], s: Settings, log: Log, baseline_ms: float | None) -> dict[str, Any]:
    out = {}
    for k in s.app_ks:
        log(f"app step: K={k}, {s.app_cycles} cycles")
        out[f"K{k}"] = run_k(pair, prompts, k, s, baseline_ms)
        log(f"app step: K={k} median step {out[f'K{k}']['step_ms']['median']:.0f} ms "
            f"(cycle {out[f'K{k}']['cycle_ms']['median']:.0f} ms)")
    return out
