"""A mock ticket tracker for the ticket-triage task: stdlib only, state in ./tickets-state.json (the
cwd is the rollout's $OPENFORGE_SERVICE_DIR), seeded from tickets.json in $OPENFORGE_TASK_DIR."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATE = Path("tickets-state.json")
SEED = Path(os.environ["OPENFORGE_TASK_DIR"]) / "services" / "tickets.json"
LOCK = threading.Lock()


def load():
    if STATE.exists():
        return json.loads(STATE.read_text())
    return [{**t, "comments": []} for t in json.loads(SEED.read_text())]


class Handler(BaseHTTPRequestHandler):
    def send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        try:
            obj = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def dispatch(self, method):
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        with LOCK:
            tickets = load()
            code, obj = self.route(method, parts, tickets)
            STATE.write_text(json.dumps(tickets, indent=1))
        self.send(code, obj)

    def route(self, method, parts, tickets):
        if parts == ["health"]:
            return 200, {"ok": True}
        if method == "GET" and parts == ["tickets"]:
            return 200, tickets
        if len(parts) >= 2 and parts[0] == "tickets":
            found = [t for t in tickets if str(t["id"]) == parts[1]]
            if not found:
                return 404, {"error": f"no ticket {parts[1]}"}
            t, body = found[0], self.body() if method in ("PATCH", "POST") else {}
            if body is None:
                return 400, {"error": "the body must be a JSON object"}
            if method == "GET" and len(parts) == 2:
                return 200, t
            if method == "PATCH" and len(parts) == 2:
                if body.get("status") not in (None, "open", "closed"):
                    return 400, {"error": "status must be open or closed"}
                labels = body.get("labels", [])
                if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                    return 400, {"error": "labels must be a list of strings"}
                if not isinstance(body.get("title", ""), str):
                    return 400, {"error": "title must be a string"}
                t.update({k: v for k, v in body.items() if k in ("status", "labels", "title")})
                return 200, t
            if method == "POST" and parts[2:] == ["comments"] and isinstance(body.get("body"), str):
                t["comments"].append(body["body"])
                return 200, t
        return 404, {"error": f"no route {method} {self.path}"}

    def do_GET(self):
        self.dispatch("GET")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_POST(self):
        self.dispatch("POST")


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
