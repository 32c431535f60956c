"""The server calls no other host (issue 33, part 10): an offline classroom has none to call.

* **The settings say so**: `.streamlit/config.toml` listens on 127.0.0.1 (a personal machine
  serves only itself), names `browser.serverAddress` (Streamlit otherwise asks an outside service
  for the machine's external IP when it prints its URLs: "Did not auto detect external IP") and
  turns usage statistics off; the Docker image listens on every interface, as the README says, and
  hides error details from pages.
* **The process does so**: the real server, started the classroom's way (every interface, where
  Streamlit printed an "External URL"), runs under a `sitecustomize` hook that records every
  `socket.connect` and name look-up; a page's script runs and a websocket of another origin knocks
  (which made Streamlit look its addresses up while running). Only loopback is reached. In a control,
  the same hook records Streamlit's own external-IP look-up, so it sees what it must.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
import textwrap
import tomllib
import urllib.request
from pathlib import Path

import pytest

from bench.load import REPO, WsClient, free_port, stop_server

HOOK = """
import json, os, socket
_log = os.environ["SPECVIZ_CONNECT_LOG"]
def _note(kind, where):
    with open(_log, "a") as f:
        f.write(json.dumps([kind, where if isinstance(where, (str, type(None))) else list(where)[:2]]) + "\\n")
_connect, _connect_ex, _lookup = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
def connect(self, address):
    _note("connect", address)
    return _connect(self, address)
def connect_ex(self, address):
    _note("connect", address)
    return _connect_ex(self, address)
def getaddrinfo(host, *args, **kwargs):
    _note("lookup", host.decode() if isinstance(host, bytes) else host)
    return _lookup(host, *args, **kwargs)
socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
_note("hook", None)  # loaded: an empty record means nothing was reached, not a hook that never ran
"""
LOCAL_NAMES = {None, "", "localhost", "0.0.0.0", "::"}


def test_the_settings_listen_locally_and_look_nothing_up():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["browser"]["serverAddress"] == "localhost" and config["browser"]["gatherUsageStats"] is False
    docker = (REPO / "Dockerfile").read_text()
    assert "STREAMLIT_CLIENT_SHOW_ERROR_DETAILS=none" in docker
    assert "STREAMLIT_BROWSER_GATHER_USAGE_STATS=false" in docker
    assert '"--server.address", "0.0.0.0"' in docker  # the image serves its classroom (README, "Past one machine")


def _local(kind: str, where) -> bool:
    if isinstance(where, str) and kind == "connect":
        return True  # a unix socket
    host = where[0] if isinstance(where, list) else where
    if host in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve_and_knock(tmp_path: Path, cwd: Path) -> tuple[list[list], str]:
    """Start the app from `cwd` under the hook, open one page's session and a foreign-origin websocket;
    return what the server process tried to reach."""
    (tmp_path / "hook").mkdir(exist_ok=True)
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(HOOK))
    log = tmp_path / f"connects-{cwd.name}.jsonl"
    port = free_port()
    env = dict(
        os.environ,
        SPECVIZ_PAIR="tiny",
        SPECVIZ_CLASSROOM="1",
        SPECVIZ_CONNECT_LOG=str(log),
        PYTHONPATH=os.pathsep.join([str(tmp_path / "hook"), str(REPO)]),
    )
    env.pop("STREAMLIT_BROWSER_GATHER_USAGE_STATS", None)
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(REPO / "app.py"),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "0.0.0.0",
        "--server.fileWatcherType",
        "none",
    ]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        asyncio.run(_knock(url))
    finally:
        stop_server(proc)
    out = proc.stdout.read()
    seen = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert ["hook", None] in seen, out
    return [entry for entry in seen if entry[0] != "hook"], out


def _wait_healthy(url: str, proc) -> None:
    for _ in range(600):  # the start-up, counted in failed polls (each waits for its own timeout)
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
    raise RuntimeError("streamlit did not answer")


async def _knock(url: str) -> None:
    from websockets.asyncio.client import connect

    async with WsClient(url, timeout_s=120) as page:
        await page.run()  # a page's first script run: settings, the pair, a run
    try:
        ws = await connect(
            url.replace("http", "ws") + "/_stcore/stream",
            subprotocols=["streamlit"],
            origin="http://elsewhere.example",
            open_timeout=30,
        )
        await ws.close()
    except Exception:  # noqa: BLE001 - refused or not: what the server tried meanwhile is what counts
        pass


@pytest.mark.slow
def test_the_server_reaches_only_loopback(tmp_path):
    seen, out = _serve_and_knock(tmp_path, REPO)
    outside = [entry for entry in seen if not _local(*entry)]
    assert not outside, outside
    assert "Did not auto detect external IP" not in out and "External URL" not in out, out
    # The control: the hook sees the call that is gone (Streamlit's own look-up, unsealed, in a bare process).
    log = tmp_path / "control.jsonl"
    env = dict(os.environ, SPECVIZ_CONNECT_LOG=str(log), PYTHONPATH=str(tmp_path / "hook"))
    subprocess.run(
        [sys.executable, "-c", "from streamlit import net_util; net_util.get_external_ip()"],
        env=env,
        check=True,
        timeout=60,
    )
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert ["lookup", "checkip.amazonaws.com"] in seen or any(not _local(*e) for e in seen if e[0] != "hook"), seen
