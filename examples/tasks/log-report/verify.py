"""Scores log-report: report/summary.md against counts made here from the same logs."""

import json
from pathlib import Path

logs = sorted(Path("logs").glob("*.log"))  # the verifier's cwd is the rollout's workdir
counts = {p.name: sum(" ERROR " in line for line in p.read_text().splitlines()) for p in logs}
report = Path("report/summary.md")
text = report.read_text() if report.is_file() else ""
lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
expected = [f"- {name}: {n} errors" for name, n in sorted(counts.items())]
scores = {
    "header": float(bool(lines) and lines[0] == "# Error summary"),
    "per_file": float([ln for ln in lines if ln.startswith("- ")] == expected),
    "total": float(bool(lines) and lines[-1] == f"## Total: {sum(counts.values())}"),
}
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores,
                  "detail": f"expected {expected}, got {lines[1:-1]}"}))
