"""Scores ticket-triage from the tracker's state, read through its API ($TICKETS_URL on the host)."""

import json
import os
import urllib.request
from pathlib import Path

seed = {t["id"]: t for t in json.loads((Path(os.environ["OPENFORGE_TASK_DIR"]) / "services" / "tickets.json").read_text())}
now = {t["id"]: t for t in json.load(urllib.request.urlopen(os.environ["TICKETS_URL"] + "/tickets", timeout=10))}
dups = {2: 1, 5: 4}
scores = {
    "duplicates_closed": float(all(now[i]["status"] == "closed" for i in dups)),
    "duplicates_commented": float(all(f"Duplicate of #{o}" in now[i]["comments"] for i, o in dups.items())),
    "bugs_labelled": float(all(now[i]["status"] == "open" and set(now[i]["labels"]) == set(seed[i]["labels"]) | {"triaged"}
                               for i in (1, 4))),
    "others_untouched": float(all({k: now[i][k] for k in ("status", "labels")} == {k: seed[i][k] for k in ("status", "labels")}
                                  and not now[i]["comments"] for i in (3, 6))),
}
changed = sorted(i for i in now if now[i]["status"] != seed[i]["status"] or now[i]["labels"] != seed[i]["labels"])
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores, "changed": changed,
                  "detail": "ok" if all(scores.values()) else "failed: " + ", ".join(k for k, v in scores.items() if not v)}))
