"""The finish benchmark runs end to end (tiny settings), so the table the README quotes stays
reproducible; skipped where git cannot show the old finish path (no git, a shallow clone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "finish_scaling.py"


def test_finish_benchmark_runs():
    sys.path.insert(0, str(BENCH.parent))
    from finish_scaling import LEGACY_REF

    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{LEGACY_REF}^{{commit}}"]).returncode != 0:
        pytest.skip(f"git revision {LEGACY_REF} (the old finish path) is not available here")
    out = subprocess.run([sys.executable, str(BENCH), "--turns", "1,4", "--stall-reps", "1", "--stall-turns", "4"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows[:2]] == ["1", "4"], out.stdout
    assert "new finish path" in out.stdout and "p99 old/new" in out.stdout
