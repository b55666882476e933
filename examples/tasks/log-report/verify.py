"""Scores log-report: report/summary.md (cwd: the rollout's workdir) against counts made here from the
task's own copy of the logs ($OPENFORGE_TASK_DIR/setup/logs), never from the workdir's logs/, which
the agent could edit to match a wrong report."""

import json
import os
from pathlib import Path

logs = sorted((Path(os.environ["OPENFORGE_TASK_DIR"]) / "setup" / "logs").glob("*.log"))
counts = {p.name: sum(" ERROR " in line for line in p.read_text().splitlines()) for p in logs}
report = Path("report/summary.md")
with open(report, errors="replace") if report.is_file() else open(os.devnull) as f:
    text = f.read(1 << 20)  # a bounded read: the report is the agent's file
lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
expected = [f"- {name}: {n} errors" for name, n in sorted(counts.items())]
scores = {
    "header": float(bool(lines) and lines[0] == "# Error summary"),
    "per_file": float([ln for ln in lines if ln.startswith("- ")] == expected),
    "total": float(bool(lines) and lines[-1] == f"## Total: {sum(counts.values())}"),
}
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores,
                  "detail": f"expected {expected}, got {lines[1:-1][:20]}"}))
