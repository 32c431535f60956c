"""specviz benchmarks (not tests): `python -m bench` runs the whole suite and writes
docs/benchmarks.md and docs/benchmarks.json.

Sections (issue 5): throughput (ours vs plain autoregressive vs Hugging Face `generate`, alone and
assisted), theory (Leviathan's speedup from measured α and c next to the measured one), app step
latency (one cycle + every figure the app builds), paged-cache cost and its growth with context,
and memory (peak RSS, KV bytes allocated vs holding valid positions).

Method, because absolute times on a shared machine are noisy: every compared system runs once
per round and prompt in a rotating order (A B C, B C A, ...), after a warm-up; figures are
medians, and speed comparisons are ratios of runs measured in the same round, then the median of
those ratios.
"""
