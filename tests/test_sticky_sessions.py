"""docker/nginx-sticky.conf really pins a browser to one replica: real nginx on loopback in front
of two stand-in replicas (tiny HTTP servers that say which one answered; Streamlit itself is not
needed to test the routing). The first response sets the affinity cookie; every later request
with it reaches the same replica; browsers without the cookie spread over both. Skipped where
nginx is not installed (Debian: `apt-get install nginx-light`)."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "docker" / "nginx-sticky.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica(http.server.ThreadingHTTPServer):
    def __init__(self, name: str) -> None:
        self.name = name

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = name.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_the_config_is_for_several_replicas_over_websockets():
    text = CONF.read_text()
    assert "hash $specviz_affinity consistent;" in text
    assert text.count("server 127.0.0.1:85") >= 2
    assert "proxy_set_header Upgrade $http_upgrade;" in text and "proxy_http_version 1.1;" in text


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_cookie_affinity_routes_each_browser_to_one_replica(tmp_path):
    replicas = [Replica("A"), Replica("B")]
    threads = [threading.Thread(target=r.serve_forever, daemon=True) for r in replicas]
    for t in threads:
        t.start()
    port = free_port()
    conf = CONF.read_text().replace("listen 80;", f"listen 127.0.0.1:{port};")
    lines = [ln for ln in conf.splitlines() if "server 127.0.0.1:85" not in ln]
    at = lines.index("        hash $specviz_affinity consistent;") + 1
    lines[at:at] = [f"        server 127.0.0.1:{r.server_address[1]};" for r in replicas]
    (tmp_path / "nginx.conf").write_text("\n".join(lines))
    for d in ("body", "proxy"):
        (tmp_path / d).mkdir()
    nginx = subprocess.Popen(
        [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g",
         f"daemon off; master_process off; pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log; "
         f"user root;"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 10
        while True:
            try:
                first = urllib.request.urlopen(base, timeout=2)
                break
            except OSError as exc:
                if nginx.poll() is not None or time.time() > deadline:
                    log = tmp_path / "error.log"
                    raise AssertionError(f"nginx did not start: {log.read_text() if log.exists() else ''}") from exc
                time.sleep(0.1)
        cookie = first.headers["Set-Cookie"].split(";")[0]
        assert cookie.startswith("specviz_replica=") and len(cookie) > len("specviz_replica=")
        home = first.read().decode()
        seen = set()
        for _ in range(15):  # the same browser: always its replica, cookie unchanged
            reply = urllib.request.urlopen(urllib.request.Request(base, headers={"Cookie": cookie}), timeout=5)
            seen.add(reply.read().decode())
            assert reply.headers["Set-Cookie"].split(";")[0] == cookie
        assert seen == {home}
        fresh = {urllib.request.urlopen(base, timeout=5).read().decode() for _ in range(24)}
        assert fresh == {"A", "B"}  # new browsers spread over the replicas (all on one: p = 2^-23)
        # A live lecture's join address names the lecturer's replica: every new student lands there and
        # keeps it (10 new browsers, each on the lecturer's replica with a 1/2 chance by hash: p = 2^-10).
        pinned = cookie.split("=", 1)[1]
        for _ in range(10):
            joined = urllib.request.urlopen(f"{base}api/specviz/live/K7QP2?replica={pinned}", timeout=5)
            assert joined.read().decode() == home and joined.headers["Set-Cookie"].split(";")[0] == cookie
        forged = urllib.request.urlopen(f"{base}?replica=x;%20Domain=evil", timeout=5)
        assert "evil" not in forged.headers["Set-Cookie"]  # only a request id's shape is taken
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        for r in replicas:
            r.shutdown()
            r.server_close()
