"""Scores the mail-reply task from the mail service's state: what the agent sent, through the API."""

import json
import os
import urllib.request
from pathlib import Path

sent = json.load(urllib.request.urlopen(os.environ["MAIL_URL"] + "/sent", timeout=10))
state = json.loads((Path(os.environ["OPENFORGE_SERVICE_DIR"]) / "mail.json").read_text())
to_alice = [m for m in sent if m.get("to") == "alice@example.com" and m.get("in_reply_to") == "m2"]
scores = {
    "read_inbox": float(any(r.startswith("GET /messages") for r in state["requests"])),
    "replied": float(bool(to_alice)),
    "correct_time": float(any("2026-12-03" in m["body"] and "14:00" in m["body"] for m in to_alice)),
}
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores, "sent": len(sent)}))
