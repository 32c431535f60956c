#!/usr/bin/env bash
# Set up (idempotently) and start the Streamlit app on the embedded default model pair.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m streamlit run app.py "$@"
