#!/usr/bin/env bash
# Set up (idempotently) and run the whole test suite, browser test included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh --browser
exec .venv/bin/python -m pytest "$@"
