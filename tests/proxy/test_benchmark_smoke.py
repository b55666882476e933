"""The proxy benchmark runs end to end (tiny settings): fake upstream in both modes, openforge with a
store, the bare relay, and its report — so the numbers the README quotes stay reproducible."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "proxy_overhead.py"


def test_proxy_benchmark_runs(tokenizer):
    out = subprocess.run([sys.executable, str(BENCH), "--requests", "20", "--seconds", "0.5", "--model-seconds", "0.5",
                          "--tokens", "4", "--ttft-ms", "5", "--itl-ms", "5", "--litellm", "none"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for row in ("direct", "openforge", "relay"):
        assert any(line.startswith(row) for line in out.stdout.splitlines()), out.stdout
    assert "openforge added p50 latency" in out.stdout and "model-like upstream" in out.stdout
    assert "live streaming" in out.stdout
