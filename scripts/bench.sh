#!/usr/bin/env bash
# The benchmark suite (issue 5): idempotent set-up, then every section, writing
# docs/benchmarks.md and docs/benchmarks.json (~20 min on a 2-core CPU; CPU only).
# Arguments go to `python -m bench`: --quick (short settings), --threads N (skip the probe), --out DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m bench "$@"
