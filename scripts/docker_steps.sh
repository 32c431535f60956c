#!/usr/bin/env bash
# The Dockerfile's steps without Docker (scripts/docker_steps.py): by default check them (COPY
# sources exist and are not .dockerignored, the scripts RUN/CMD call exist and parse, the torch pin
# reads from requirements.txt) and print the plan; `--run DIR` executes the RUN steps with DIR as
# the image's WORKDIR (a real install: minutes of CPU, GBs of disk). Needs only python3.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
exec "$PYTHON" scripts/docker_steps.py "$@"
