"""Harbor's own ATIF validator (``harbor.utils.trajectory_validator``), run in a child process from the harbor
wheel that ``scripts/harbor-validator.sh`` unpacks into the cache: the test process never imports harbor, and
openforge's exporter never sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testdeps import missing

HARBOR_VERSION = "0.26.0"  # as pinned in scripts/harbor-validator.sh

_CHECK = """
import json, sys
from harbor.utils.trajectory_validator import TrajectoryValidator
out = {}
for p in sys.argv[1:]:
    v = TrajectoryValidator()
    out[p] = [] if v.validate(p) else v.get_errors()
print(json.dumps(out))
"""


def harbor_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    d = cache / "openforge" / f"harbor-{HARBOR_VERSION}"
    if not (d / "harbor" / "utils" / "trajectory_validator.py").is_file():
        missing(f"harbor's ATIF validator is not at {d} (run scripts/harbor-validator.sh)")
    return d


def harbor_errors(paths: list[Path]) -> dict[str, list[str]]:
    """Harbor's validation errors for each document (an empty list: valid)."""
    assert paths, "no ATIF document to validate"
    r = subprocess.run([sys.executable, "-c", _CHECK, *map(str, paths)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(harbor_dir())})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
