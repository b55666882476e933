"""A mock mail service for the mail-reply task: stdlib only, state in ./mail.json (the cwd is the
rollout's $OPENFORGE_SERVICE_DIR), seeded from inbox.json next to this file."""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATE = Path("mail.json")
LOCK = threading.Lock()


def load():
    if STATE.exists():
        return json.loads(STATE.read_text())
    inbox = json.loads((Path(__file__).parent / "inbox.json").read_text())
    return {"inbox": inbox, "sent": [], "requests": []}


def save(state):
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(STATE)


class Handler(BaseHTTPRequestHandler):
    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_one(self, method):
        with LOCK:
            state = load()
            if self.path != "/health":
                state["requests"].append(f"{method} {self.path}")
            code, obj = self.route(method, state)
            save(state)
        self.reply(code, obj)

    def route(self, method, state):
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if method == "GET" and parts == ["health"]:
            return 200, {"ok": True}
        if method == "GET" and parts == ["messages"]:
            return 200, state["inbox"]
        if method == "GET" and len(parts) == 2 and parts[0] == "messages":
            found = [m for m in state["inbox"] if m["id"] == parts[1]]
            return (200, found[0]) if found else (404, {"error": f"no message {parts[1]}"})
        if method == "POST" and parts in (["send"], ["deliver"]):
            try:
                msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            except ValueError:
                return 400, {"error": "the body must be JSON"}
            if not isinstance(msg, dict):
                return 400, {"error": "the body must be a JSON object"}
            if parts == ["deliver"]:
                msg = {"id": f"m{len(state['inbox']) + 1}", **msg}
                state["inbox"].append(msg)
                return 200, msg
            missing = [k for k in ("to", "subject", "body") if not msg.get(k)]
            if missing:
                return 400, {"error": f"missing {', '.join(missing)}"}
            wrong = [k for k in ("to", "subject", "body", "in_reply_to") if k in msg and not isinstance(msg[k], str)]
            if wrong:
                return 400, {"error": f"{', '.join(wrong)} must be a string"}
            msg = {"id": f"s{len(state['sent']) + 1}", "from": "me@example.com", **msg}
            state["sent"].append(msg)
            return 200, msg
        if method == "GET" and parts == ["sent"]:
            return 200, state["sent"]
        return 404, {"error": f"no route {method} {self.path}"}

    def do_GET(self):
        self.handle_one("GET")

    def do_POST(self):
        self.handle_one("POST")

    def log_message(self, fmt, *args):
        sys.stdout.write("mail: " + fmt % args + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
    print(f"mail: listening on {server.server_address[1]}, state in {Path.cwd()}", flush=True)
    server.serve_forever()
