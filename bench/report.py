"""The goal verdicts and docs/benchmarks.md, computed from the results dict (never by hand)."""

from __future__ import annotations

from typing import Any

GPU_NOTE = (
    "No GPU was lent to this task (the device pool lent none when the suite was built), so every "
    "figure here is CPU-only; the issue's GPU measurements (synthetic ~1B target in bfloat16, forced "
    "acceptance patterns) are not done."
)


def _f(x: Any, fmt: str = ".2f", none: str = "—") -> str:
    return none if x is None else format(x, fmt)


def _med(d: Any) -> Any:
    return d.get("median") if isinstance(d, dict) else None


def _rng(d: Any, fmt: str = ".2f") -> str:
    if not isinstance(d, dict) or d.get("median") is None:
        return "—"
    if d.get("n", 0) <= 1:
        return format(d["median"], fmt)
    return f"{format(d['median'], fmt)} ({format(d['min'], fmt)}–{format(d['max'], fmt)})"


def goals(r: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, target: str, value: Any, met: bool | None, detail: str) -> None:
        out.append({"goal": name, "target": target, "value": value, "met": met, "detail": detail})

    tp = r.get("throughput") or {}
    best = (tp.get("best_k") or {}).get("T0")
    if best:
        add(
            "speculative T=0, best K, vs autoregressive",
            ">= 1.3x",
            best["speedup_vs_ar"],
            best["speedup_vs_ar"] >= 1.3,
            f"K={best['k']}: {best['speedup_vs_ar']:.2f}x (median of paired runs)",
        )
    hf = (tp.get("comparisons") or {}).get("ours_vs_hf_assisted") or {}
    vals = {key: _med(v) for key, v in hf.items() if _med(v) is not None}
    if vals:
        worst = min(vals, key=vals.get)
        add(
            "ours (instrumentation off) vs HF assisted, same K and T",
            ">= 1.0x",
            vals[worst],
            vals[worst] >= 1.0,
            f"lowest at {worst}: {vals[worst]:.2f}x; all: " + ", ".join(f"{k} {v:.2f}x" for k, v in vals.items()),
        )
    ls = (r.get("lockstep") or {}).get("by_temperature") or {}

    def lockstep_vals(prefix: str) -> dict[str, float]:
        return {
            f"{key.split('/', 1)[1]}/{t}": _med(v)
            for t, row in ls.items()
            for key, v in row["ratios"].items()
            if key.startswith(prefix) and _med(v) is not None
        }

    vals = lockstep_vals("instrumented_over_lean")
    if vals:
        worst = max(vals, key=vals.get)
        add(
            "instrumentation cost (per cycle, lockstep)",
            "<= 10%",
            vals[worst] - 1,
            vals[worst] <= 1.10,
            f"worst {worst}: {100 * (vals[worst] - 1):+.1f}%; all: "
            + ", ".join(f"{k} {100 * (v - 1):+.1f}%" for k, v in vals.items()),
        )
    app = r.get("app_step") or {}
    k4 = app.get("K4") or next(iter(app.values()), None)
    if k4:
        step = _med(k4["step_ms"])
        add(
            "app step (cycle + figures) at K=4",
            "< 300 ms median",
            step,
            step < 300,
            f"{step:.0f} ms (cycle {_med(k4['cycle_ms']):.0f} ms + figures {_med(k4['figures_ms']):.0f} ms)",
        )
    add_proposer_goals(r.get("proposers") or {}, add)
    vals = lockstep_vals("paged_over_contiguous")
    if vals:
        worst = max(vals, key=vals.get)
        add(
            "paged over contiguous, per cycle (lockstep)",
            "<= 1.15x",
            vals[worst],
            vals[worst] <= 1.15,
            f"worst {worst}: {vals[worst]:.3f}x; all: " + ", ".join(f"{k} {v:.3f}x" for k, v in vals.items()),
        )
    return out


def _best_learned(pr: dict[str, Any]) -> str | None:
    """The better learned proposer (draft or feature): the faster at T=0 (its best K, measured
    against the target's greedy generate) -- speed is what speculative decoding is for; ties go to
    the higher acceptance at quality K. The app and CLI open on the same one."""
    k = pr.get("quality_k")
    score = {}
    for p in ("draft", "feature"):
        fast = _best_speed(pr, (p,))
        acc = (pr.get("greedy", {}).get(f"{p}_K{k}_T0") or {}).get("acceptance_rate")
        if fast is not None and acc is not None:
            score[p] = (round(fast["measured_speedup"], 2), acc)
    return max(score, key=score.get) if score else None


def _best_speed(pr: dict[str, Any], proposers: tuple[str, ...]) -> dict[str, Any] | None:
    rows = [row for row in pr.get("rows", []) if row["proposer"] in proposers and row["measured_speedup"] is not None]
    return max(rows, key=lambda row: row["measured_speedup"]) if rows else None


def add_proposer_goals(pr: dict[str, Any], add: Any) -> None:
    """The bounds of the proposers issue, for the better learned proposer."""
    best = _best_learned(pr)
    if best is None:
        return
    k = pr["quality_k"]
    g = pr["greedy"][f"{best}_K{k}_T0"]
    acc, tpc = g["acceptance_rate"], g["tokens_per_cycle"]
    add(f"better learned proposer ({best}), K={k}, T=0: acceptance", ">= 0.65", acc, acc >= 0.65,
        f"{acc:.3f} (accepted ÷ tested drafts)")
    add(f"better learned proposer ({best}), K={k}, T=0: tokens per cycle", ">= 2.5", tpc, tpc >= 2.5, f"{tpc:.2f}")
    alpha = (pr["sampled"].get(best) or {}).get("alpha")
    if alpha is not None:
        by_depth = {int(d): v for d, v in pr["sampled"][best]["alpha_by_depth"].items()}  # JSON keys are strings
        depth1 = by_depth.get(1, float("nan"))
        add(f"better learned proposer ({best}), K={k}, T=1: α = E[Σ min(p,q)]", ">= 0.55", alpha, alpha >= 0.55,
            f"{alpha:.3f} over all drafted positions (depth 1: {depth1:.3f})")
    c = ((pr["cost"].get(best) or {}).get("c") or {}).get("median")
    if c is not None:
        add(f"one draft step of the better learned proposer ({best}) ÷ one target step", "<= 0.08", c, c <= 0.08,
            f"c = {c:.3f}")
    fast = _best_speed(pr, tuple(pr.get("proposers", [])))
    if fast:
        add("best proposer and K at T=0 vs the target's plain greedy generate", ">= 1.3x", fast["measured_speedup"],
            fast["measured_speedup"] >= 1.3,
            f"{fast['proposer']} K={fast['K']}: {fast['measured_speedup']:.2f}x (median of per-prompt ratios; "
            f"pooled {_f(fast['pooled_speedup'])}x)")


def proposers_markdown(pr: dict[str, Any]) -> list[str]:
    k = pr["quality_k"]
    L = [
        "## Proposers: draft model vs feature head vs prompt lookup",
        "",
        "Same held-out prompts, same threads, contiguous cache, interleaved with the target's own plain greedy "
        "`generate` (the speed baseline). Acceptance = accepted ÷ tested drafts; α = mean Σ min(p, q) over "
        "every drafted position at T=1; c = one draft step ÷ one target decode step (same context, interleaved); "
        "v(K) = verify ms ÷ target step ms; predicted = E(α, K) / (K·c + v(K)).",
        "",
        f"### Quality at K={k}",
        "",
        "| proposer | T=0 acceptance | T=0 tokens/cycle | T=1 α (all depths) | α by depth | T=1 acceptance | c |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for p in pr["proposers"]:
        g = pr["greedy"].get(f"{p}_K{k}_T0", {})
        a = pr["sampled"].get(p, {})
        depth = ", ".join(f"{d}: {v:.2f}" for d, v in (a.get("alpha_by_depth") or {}).items())
        c = ((pr["cost"].get(p) or {}).get("c") or {}).get("median")
        L.append(f"| {p} | {_f(g.get('acceptance_rate'), '.3f')} | {_f(g.get('tokens_per_cycle'))} | "
                 f"{_f(a.get('alpha'), '.3f')} | {depth} | {_f(a.get('acceptance_rate'), '.3f')} | "
                 f"{_f(c, '.3f', '0 (no model)')} |")
    L += ["", "### Cost of one draft step", "", "| proposer | draft step ms | target step ms | c |",
          "|---|---:|---:|---:|"]
    for p, c in pr["cost"].items():
        L.append(f"| {p} | {_rng(c['draft_step_ms'])} | {_rng(c['target_step_ms'])} | {_rng(c['c'], '.3f')} |")
    L += ["", "### Speed at T=0 against the target's plain greedy `generate`", "",
          "| proposer | K | acceptance | tokens/cycle | v(K) | predicted with v(K) | measured (median, per prompt) "
          "| pooled | same text as greedy |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in pr["rows"]:
        L.append(f"| {row['proposer']} | {row['K']} | {_f(row['acceptance_rate'], '.3f')} | "
                 f"{_f(row['tokens_per_cycle'])} | "
                 f"{_f(row['verify_cost'])} | {_f(row['predicted_speedup_verify_cost'])}x | "
                 f"{_f(row['measured_speedup'])}x | {_f(row['pooled_speedup'])}x | {row['same_text_as_greedy']} |")
    base = (pr["greedy"].get("hf_greedy") or {}).get("tokens_per_s")
    if base:
        L += ["", f"Target's plain greedy `generate`: {_rng(base, '.1f')} tokens/s."]
    L.append("")
    return L


def markdown(r: dict[str, Any]) -> str:
    """docs/benchmarks.md: one section per measurement the results hold, in the suite's order."""
    sections = (_header, _method, _goals_table, _throughput, _lockstep, _theory, _proposers, _app_step,
                _paging, _memory, _profiles, _sampling_draws)  # fmt: skip
    return "\n".join(line for section in sections for line in section(r)) + "\n"


def _header(r: dict[str, Any]) -> list[str]:
    m, pair = r["machine"], r["pair"]
    return [
        "# specviz benchmarks",
        "",
        "*Written by the benchmark suite (`bench/`); do not edit by hand — rerun it. Raw numbers, every run: "
        "[benchmarks.json](benchmarks.json).*",
        "",
        f"- **Command:** `bash scripts/bench.sh` (runs `{r.get('command') or 'python -m bench'}` after the set-up)",
        f"- **Date:** {r['started_utc']} · **wall time of the suite:** {r['wall_seconds'] / 60:.1f} min",
        f"- **Pair:** {pair['target']} ({pair['target_params'] / 1e6:.1f} M params) + "
        f"{pair['draft']} ({pair['draft_params'] / 1e6:.1f} M params), {pair['dtype']} on {pair['device']}",
        (
            f"- **Draft weights measured:** `{r['draft_file']['path']}`, modified {r['draft_file']['modified_utc']}, "
            f"sha256 {r['draft_file']['sha256_12']}… (the draft is retrained from time to time; α depends on it)"
            if r.get("draft_file")
            else "- **Draft weights measured:** (not the default pair)"
        ),
        f"- **Machine:** {m['cpu']}, {m['physical_cpus']} physical / {m['logical_cpus']} logical CPUs, "
        f"{m['memory_gb']} GB RAM; Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}; "
        f"load average at start {', '.join(f'{x:.1f}' for x in m['load_average_start'])}, at end "
        f"{', '.join(f'{x:.1f}' for x in m.get('load_average_end', ()))}; git {m.get('git_commit', '')}",
        f"- **GPU:** {GPU_NOTE}",
        "",
    ]


def _method(r: dict[str, Any]) -> list[str]:
    th, s = r.get("threads", {}), r["settings"]
    L = [
        "## Method",
        "",
        f"- `torch.set_num_threads({th.get('chosen')})` for every measurement ({th.get('how')}). "
        "Why a probe: on a shared 2-core CPU, 2 OpenMP threads stall whenever one is descheduled "
        "(see `bench/threads.py`).",
    ]
    if th.get("candidates"):
        L.append(
            "  Probe (median ms, target model): "
            + "; ".join(
                f"{n} thread(s): decode {_f(v['decode_ms'], '.1f')}, 5-token verify {_f(v['verify5_ms'], '.1f')}"
                for n, v in th["candidates"].items()
            )
        )
    return L + [
        f"- {s['prompts']} held-out chat prompts (topics the draft never saw), {s['max_new_tokens']} new tokens "
        f"per run, {s['rounds']} rounds. Every compared system runs once per round and prompt in a rotating "
        "order, after a warm-up. Speed figures are medians over runs; every comparison is a ratio of two runs "
        "of the same prompt in the same round, then the median of those ratios (min–max in brackets).",
        "- Timed whole, prefill included (as `generate` is). tokens/s = new tokens / seconds.",
        "",
    ]


def _goals_table(r: dict[str, Any]) -> list[str]:
    L = ["## Goals", "", "| goal | target | measured | status |", "|---|---|---|---|"]
    for g in r.get("goals", []):
        L.append(f"| {g['goal']} | {g['target']} | {g['detail']} | {'**met**' if g['met'] else '**not met**'} |")
    return L + [""]


def _throughput(r: dict[str, Any]) -> list[str]:
    tp = r.get("throughput")
    if not tp:
        return []
    L = [
        "## 1. Decoding throughput",
        "",
        "`ar` = specviz's autoregressive decoder (contiguous cache); `spec/K/T/layout/lean|instrumented` = "
        "`SpeculativeDecoder` (lean = `instrument=False`); `hf` = transformers `generate`; `hf-assisted` = "
        "`generate(assistant_model=draft)` with `num_assistant_tokens=K`, schedule `constant`, "
        "`assistant_confidence_threshold=0`.",
        "",
        "| system | tokens/s | speedup vs ar (same T) | acceptance rate | tokens/cycle | ms/cycle |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in tp["systems"].items():
        L.append(
            f"| `{name}` | {_rng(row['tokens_per_s'], '.1f')} | {_rng(row['speedup_vs_ar'])} | "
            f"{_f(row.get('acceptance_rate'))} | {_f(row.get('tokens_per_cycle'))} | "
            f"{_rng(row.get('ms_per_cycle'), '.0f') if row.get('ms_per_cycle') else '—'} |"
        )
    c = tp["comparisons"]
    L += ["", "Same-run ratios:", "", "| comparison | median (min–max) |", "|---|---:|"]
    for key, v in c["ours_vs_hf_assisted"].items():
        L.append(f"| ours lean (contiguous) / hf-assisted, tokens/s, {key} | {_rng(v)} |")
    for key, v in c.get("hf_assisted_over_ours_ms_per_cycle", {}).items():
        L.append(f"| hf-assisted / ours lean, ms per cycle (acceptance luck removed), {key} | {_rng(v)} |")
    for key, v in c["ar_vs_hf_generate"].items():
        L.append(f"| ar / hf generate, tokens/s, {key} | {_rng(v)} |")
    g = c["greedy_outputs_identical"]
    differing = (
        f" ({', '.join(g['differing_systems'])}: float rounding of batched passes can flip near-ties)"
        if g["differing_runs"]
        else ""
    )
    return L + [
        "",
        f"Temperature 0 sanity check: {g['identical_runs']} runs decoded exactly the baseline's greedy "
        f"text, {g['differing_runs']} differed{differing}.",
        "",
    ]


def _lockstep(r: dict[str, Any]) -> list[str]:
    lsr = r.get("lockstep")
    if not lsr:
        return []
    L = [
        f"### Layout and instrumentation, cycle by cycle (K={lsr['k']})",
        "",
        "The four variants decode the same prompts side by side: cycle i of each runs back to back (rotating "
        "order) before cycle i+1 of any, so each ratio compares the same work measured within a fraction of a "
        "second (`bench/lockstep.py`). Ratios are medians over all cycles of the per-cycle time ratio.",
        "",
        "| T | variant | ms/cycle | tokens/s | cycles | same tokens in all four |",
        "|---:|---|---:|---:|---:|:-:|",
    ]
    for t, row in lsr["by_temperature"].items():
        for name, v in row["variants"].items():
            L.append(
                f"| {t[1:]} | {name} | {_rng(v['ms_per_cycle'], '.0f')} | {_f(v['tokens_per_s'], '.1f')} | "
                f"{v['cycles']} | {'yes' if row['identical'] else 'NO'} |"
            )
    L += ["", "| T | ratio | median (min–max) over cycles |", "|---:|---|---:|"]
    for t, row in lsr["by_temperature"].items():
        for name, v in row["ratios"].items():
            L.append(f"| {t[1:]} | {name.replace('_', ' ')} | {_rng(v, '.3f')} |")
    return L + [""]


def _theory(r: dict[str, Any]) -> list[str]:
    th2 = r.get("theory")
    if not th2:
        return []
    a, cost = th2["alpha"], th2["cost"]
    L = [
        "## 2. Against theory",
        "",
        f"- α measured directly on the baseline's texts (teacher-forced, both models): T=0 (greedy agreement) "
        f"**{_f(a['T0']['alpha'], '.3f')}** over {a['T0']['positions']} positions; T=1 (mean Σ min(p, q)) "
        f"**{_f(a['T1']['alpha'], '.3f')}** over {a['T1']['positions']} positions.",
        f"- Cost: target {_rng(cost['target_ms_per_token'], '.1f')} ms/token, draft "
        f"{_rng(cost['draft_ms_per_token'], '.1f')} ms/token → **c = {_rng(cost['c'], '.3f')}** "
        "(one-token decode steps, prefill excluded, interleaved).",
        "- Predicted = (1 − α^(K+1)) / ((1 − α)(K·c + 1)) (Leviathan et al.); *with v(K)* replaces the 1 by the "
        "measured verify cost v(K) = verify-pass ms ÷ target ms/token (the formula assumes 1).",
        "",
        "| T | K | α (traces) | E[tokens/cycle] | measured tokens/cycle | v(K) | predicted | predicted with v(K) "
        "| measured | α needed for 1.3x (with v(K)) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in th2["rows"]:
        L.append(
            f"| {row['T']} | {row['K']} | {_f(row['alpha_traces'], '.3f')} | "
            f"{_f(row['expected_tokens_per_cycle'])} | {_f(row['measured_tokens_per_cycle'])} | "
            f"{_f(row['verify_cost'])} | {_f(row['predicted_speedup'])}x | "
            f"{_f(row['predicted_speedup_verify_cost'])}x | {_f(row['measured_speedup'])}x | "
            f"{_f(row.get('alpha_needed_for_1.3x'), '.2f', 'unreachable')} |"
        )
    L.append("")
    for t, b in th2["best_k"].items():
        L.append(
            f"- Best K at {t}: measured **K={b['measured_k']}**, predicted K={b['predicted_k']} "
            f"(K={b['predicted_k_verify_cost']} with v(K))."
        )
    return L + [""]


def _proposers(r: dict[str, Any]) -> list[str]:
    return proposers_markdown(r["proposers"]) if r.get("proposers") else []


def _app_step(r: dict[str, Any]) -> list[str]:
    app = r.get("app_step")
    if not app:
        return []
    L = [
        "## 3. App step latency",
        "",
        "One `step()` (instrumented, paged, page 16, T=1, as the app) plus building every figure the app "
        "shows for a cycle (token strip, narrative, KV view (HTML), proposals, acceptance, p vs q, "
        "residual/bonus, statistics, speedup). JSON serialisation (sent to the browser) is extra; browser "
        f"rendering is not measured. Median (min–max) over {r['settings']['app_cycles']} cycles after 2 warm-up "
        "cycles.",
        "",
        "| K | step (cycle + figures), ms | cycle, ms | figures, ms | + JSON serialisation, ms "
        "| figures without validation (est.), ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for k, row in app.items():
        L.append(
            f"| {k[1:]} | {_rng(row['step_ms'], '.0f')} | {_rng(row['cycle_ms'], '.0f')} | "
            f"{_rng(row['figures_ms'], '.0f')} | {_rng(row['serialize_ms'], '.0f')} | "
            f"{_rng(row.get('unvalidated_figures_ms'), '.0f')} |"
        )
    for k, row in app.items():
        errs = row.get("figure_errors") or {}
        if errs.get("count"):
            L.append(
                f"- **{errs['count']} figure builds raised at {k}** (an app bug; timed up to the "
                "exception): " + "; ".join(f"`{e}`" for e in errs["distinct"])
            )
    figs = [key for key in next(iter(app.values())) if key.startswith("fig_")]
    per_figure = "; ".join(
        f"{key[4:]}: " + ", ".join(f"{k} {_f(_med(row[key]), '.1f')}" for k, row in app.items()) for key in figs
    )
    return L + ["", "Per figure (median ms): " + per_figure, ""]


def _paging(r: dict[str, Any]) -> list[str]:
    pg, lsr = r.get("paging"), r.get("lockstep")
    if not pg:
        return []
    mm = pg["model"]
    L = ["## 4. Paged-cache cost and growth with context", ""]
    if lsr:
        pairs = [
            f"{name.split('/')[1]}/{t} **{_rng(v, '.3f')}x**"
            for t, row in lsr["by_temperature"].items()
            for name, v in row["ratios"].items()
            if name.startswith("paged")
        ]
        L += [f"Default pair, paged ÷ contiguous time per cycle at K={lsr['k']} (lockstep): " + "; ".join(pairs), ""]
    L += [
        f"Context sweep on a synthetic {mm['shape']}-shaped Llama with random weights ({mm['num_hidden_layers']} "
        f"layers, {mm['num_key_value_heads']} KV heads, hidden {mm['hidden_size']}, vocab {mm['vocab_size']}), "
        f"caches filled with random K/V, scattered block table, page 16; {pg['bytes_per_position']} KV bytes "
        f"per position. Median of {r['settings']['context_reps']} interleaved repetitions.",
        "",
        "| context L | KV read per step, MB | kv read+write ms: contiguous / paged | decode ms: contiguous / paged "
        "(ratio) | 5-token verify ms: contiguous / paged (ratio) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in pg["rows"]:
        L.append(
            f"| {row['context']} | {row['kv_bytes_read_per_step'] / 1e6:.1f} | "
            f"{_f(_med(row['contiguous_kv_read_ms']))} / {_f(_med(row['paged_kv_read_ms']))} | "
            f"{_f(_med(row['contiguous_decode_ms']), '.1f')} / {_f(_med(row['paged_decode_ms']), '.1f')} "
            f"({_f(row['paged_over_contiguous_decode_ms'])}x) | "
            f"{_f(_med(row['contiguous_verify_ms']), '.1f')} / {_f(_med(row['paged_verify_ms']), '.1f')} "
            f"({_f(row['paged_over_contiguous_verify_ms'])}x) |"
        )
    return L + [""]


def _memory(r: dict[str, Any]) -> list[str]:
    mem = r.get("memory")
    if not mem:
        return []
    L = [
        "## 5. Memory",
        "",
        "Peak RSS of the suite process after each section (MB): "
        + ", ".join(f"{k.removeprefix('after_')} {v:.0f}" for k, v in r["peak_rss_mb"].items())
        + ".",
        "",
        f"KV bytes after a long run (K=8, T=1, {r['settings']['memory_tokens']} new tokens, max_context "
        f"{mem['max_context']}): allocated = K/V tensors that exist; held = owned by the sequence (whole "
        "buffer, or its block-table blocks); valid = positions 0..L−1; waste = 1 − valid/held.",
        "",
        "| layout / policy | model | L | allocated MiB | held MiB | valid MiB | waste of held | valid / allocated "
        "| blocks held (peak) / needed | extra blocks after rollback, mean over cycles |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in mem["runs"]:
        for who in ("target", "draft"):
            b = run[who]
            blocks = (
                f"{b['blocks_held']} ({b.get('peak_blocks_held')}) / {b['blocks_needed']}"
                if b["blocks_held"] is not None
                else "—"
            )
            L.append(
                f"| {run['layout']} / {run['policy']} | {who} | {b['seq_len']} | "
                f"{b['allocated_bytes'] / 2**20:.1f} | {b['held_bytes'] / 2**20:.2f} | "
                f"{b['valid_bytes'] / 2**20:.2f} | {_f(b['waste_of_held'], '.1%')} | "
                f"{_f(b['valid_of_allocated'], '.1%')} | {blocks} | "
                f"{_f(b.get('mean_extra_blocks_after_rollback'))} |"
            )
    return L + [""]


_PROFILE_TABLES = (
    ("torch_ops", "torch operators, lean cycles", ("op", "calls", "own_ms", "total_ms")),
    ("python_cycle", "Python functions, instrumented cycles", ("function", "calls", "own_ms", "cum_ms")),
    ("figures", "Python functions, building the app's figures", ("function", "calls", "own_ms", "cum_ms")),
)


def _profiles(r: dict[str, Any]) -> list[str]:
    prof = r.get("profile")
    if not prof:
        return []
    L = [
        "## 6. Profiles",
        "",
        f"K=4, T=1, paged, {prof['cycles']} cycles. Top rows by own time (`bench/profiling.py`).",
        "",
    ]
    for key, title, cols in _PROFILE_TABLES:
        groups = prof.get(f"{key}_groups") or {}
        shares = [
            f"{label} {100 * g['share']:.0f}%" for label, g in groups.items() if isinstance(g, dict) and g.get("share")
        ]
        L += [
            f"**{title}** — own time {_f(groups.get('total_own_ms'), '.0f')} ms"
            + (": " + "; ".join(shares) if shares else ""),
            "",
            "| " + " | ".join(cols) + " |",
            "|---|" + "---:|" * (len(cols) - 1),
        ]
        for row in prof[key][:10]:
            cells = (
                f"`{row[c]}`" if i == 0 else (f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]))
                for i, c in enumerate(cols)
            )
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
    return L


def _sampling_draws(r: dict[str, Any]) -> list[str]:
    draws = (r.get("profile") or {}).get("sampling_draw_ms")
    if not draws:
        return []
    return [
        f"One sampling draw from a {draws['vocab']}-token distribution: `torch.multinomial` "
        f"{draws['multinomial']:.3f} ms (what `sampling.sample` does: one exponential random number per "
        f"token) vs inverse CDF (float64 cumsum + searchsorted, one uniform) {draws['inverse_cdf']:.3f} ms.",
        "",
    ]
