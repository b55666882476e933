"""The in-pod agent of the Kubernetes launcher: a tiny HTTP server that runs commands and moves files.

Stdlib only; the launcher ships its source in the pod's command (``python3 -c SOURCE ...``), so any
image with ``python3`` works. The driver reaches it through the API server's pod proxy
(``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/...``) — no Service, no port-forward — and every
request must carry the per-rollout token (``X-Openforge-Token``; given to the pod through a Secret).

Routes: ``GET /healthz``; ``POST /exec`` ``{argv, env, cwd, timeout_s, stdin_b64, grace_s}`` → ``{returncode,
stdout, stderr, duration_s, timed_out}`` (own process group; on timeout SIGTERM then SIGKILL of the
group); ``GET /file?path=&root=&max_bytes=`` → bytes (read as a hostile file by ``_hostile_read``: no
link below ``root`` followed, regular files only, never blocking, at most ``max_bytes``; 404 with
``"missing": true`` when absent, 403 with ``"refused": true`` otherwise); ``PUT /file?path=&mode=`` (raw
bytes, or JSON ``{data_b64}``); ``GET /tar?path=`` → a gzip tar.

``_hostile_read`` is imported (from the package, or as a sibling when this file runs as a script); the
source shipped to the pod has that module's source in place of the import
(``k8s_manifests.agent_source``).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

# >>> _hostile_read (the pod gets that module's source here: k8s_manifests.agent_source)
try:
    from ._hostile_read import DEFAULT_MAX_BYTES, FileRefused, read_hostile
except ImportError:  # run as a script, beside it
    from _hostile_read import DEFAULT_MAX_BYTES, FileRefused, read_hostile  # type: ignore[no-redef]
# <<< _hostile_read

TOKEN = os.environ.pop("OPENFORGE_AGENT_TOKEN", "")


def run(req: dict) -> dict:
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENFORGE_AGENT")}
    env.update(req.get("env") or {})
    stdin = base64.b64decode(req["stdin_b64"]) if req.get("stdin_b64") is not None else None
    try:
        proc = subprocess.Popen(req["argv"], cwd=req.get("cwd") or None, env=env, start_new_session=True,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        return {"returncode": 127, "stdout": "", "stderr": f"cannot run {req['argv'][0]!r}: {e}",
                "duration_s": time.monotonic() - t0, "timed_out": False}
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=req.get("timeout_s"))
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, float(req.get("grace_s", 2.0))), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            try:
                out, err = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    try:  # nothing of this command outlives it
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    return {"returncode": None if timed_out else proc.returncode, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace"), "duration_s": time.monotonic() - t0, "timed_out": timed_out}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def _reply(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _auth(self) -> bool:
        if TOKEN and self.headers.get("X-Openforge-Token") != TOKEN:
            self._reply(403, b'{"error": "bad token"}')
            return False
        return True

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path.endswith("/healthz"):
            return self._reply(200, b'{"ok": true}')
        if not self._auth():
            return None
        try:
            if url.path.endswith("/file"):
                root = q.get("root") or os.path.dirname(q["path"])
                data = read_hostile(q["path"], root=root, max_bytes=int(q.get("max_bytes", DEFAULT_MAX_BYTES)))
                return self._reply(200, data, "application/octet-stream")
            if url.path.endswith("/tar"):
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                    tar.add(q["path"], arcname=".")
                return self._reply(200, buf.getvalue(), "application/gzip")
        except FileRefused as e:  # the agent left a FIFO, a link, a huge file: a distinct answer
            return self._reply(403, json.dumps({"error": e.why, "refused": True}).encode())
        except (FileNotFoundError, NotADirectoryError) as e:  # the agent did not write it: a distinct answer
            return self._reply(404, json.dumps({"error": str(e), "missing": True}).encode())
        except ValueError as e:
            return self._reply(400, json.dumps({"error": str(e)}).encode())
        except (OSError, KeyError) as e:
            return self._reply(404, json.dumps({"error": str(e)}).encode())
        return self._reply(404, b'{"error": "no such route"}')

    def do_PUT(self) -> None:
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if not self._auth():
            return None
        data = self._body()
        try:
            if (self.headers.get("Content-Type") or "").startswith("application/json"):
                data = base64.b64decode(json.loads(data)["data_b64"])
            os.makedirs(os.path.dirname(q["path"]) or ".", exist_ok=True)
            with open(q["path"], "wb") as f:
                f.write(data)
            os.chmod(q["path"], int(q.get("mode", "420")))
        except (OSError, KeyError, ValueError) as e:
            return self._reply(400, json.dumps({"error": str(e)}).encode())
        return self._reply(200, b'{"ok": true}')

    def do_POST(self) -> None:
        if not self._auth():
            return None
        if not urlparse(self.path).path.endswith("/exec"):
            return self._reply(404, b'{"error": "no such route"}')
        try:
            req = json.loads(self._body())
        except ValueError:
            return self._reply(400, b'{"error": "bad json"}')
        return self._reply(200, json.dumps(run(req)).encode())


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8790)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--mkdir", action="append", default=[])
    a = p.parse_args(argv)
    for d in a.mkdir:
        os.makedirs(d, exist_ok=True)
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    server.daemon_threads = True
    print(f"LISTENING {server.server_address[1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
