"""``benchmarks/main_job.py``: its phases are cut from the job's own log lines (so a renamed log line
breaks this test, not the README's table) and its /proc sampler sums the whole process tree."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "main_job.py"


def _bench():
    spec = importlib.util.spec_from_file_location("main_job_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # dataclasses resolve their module
    spec.loader.exec_module(mod)
    return mod


def test_phases_come_from_the_jobs_log_lines():
    b = _bench()
    lines = ["[05:25:26] held-out before (start): 9 tasks × 3 trials × 1 harness(es)",
             "[05:39:29] SFT warm-start: teacher 'reference', 1 rollout(s) per task",
             "[05:40:57] sft step 1: loss 1.8306 (33.0s)",
             "[05:47:42] held-out warmstart (SFT): 9 tasks × 3 trials × 1 harness(es)",
             "[05:56:53] step 1/2: rolling out",
             "[06:01:03] step 1: 1 of 4 groups mixed (target 2): resample round 1/3",
             "[06:05:00] step 2/2: rolling out",
             "[06:09:00] held-out after (end): 9 tasks × 3 trials × 1 harness(es)"]
    assert [b.phase_of(x) for x in lines] == ["before", "sft", None, "warmstart", "step 1", None, "step 2", "after"]
    marks = [(10.0, "before"), (20.0, "sft")]
    assert b.cut_phases(marks, 0.0, 25.0) == [("load", 0.0, 10.0), ("before", 10.0, 20.0), ("sft", 20.0, 25.0)]
    rows = b.phase_rows(b.cut_phases(marks, 0.0, 25.0), [(5.0, 1 << 20, 1 << 19, 1), (15.0, 3 << 20, 2 << 20, 4)],
                        cached={"sft"})
    assert [(r["phase"], r["peak_rss_gib"], r["max_procs"]) for r in rows] == \
        [("load", 1.0, 1), ("before", 3.0, 4), ("sft (cached)", 3.0, 4)]


def test_the_forge_logs_each_grpo_steps_start():
    """The profile's ``step N`` phases start at this line of :meth:`Forge._grpo_step`."""
    src = (Path(__file__).resolve().parents[2] / "openforge" / "runner" / "forge.py").read_text()
    assert 'f"step {step + 1}/{cfg.trainer.steps}: rolling out"' in src


def test_the_sampler_sums_the_process_tree():
    b = _bench()
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                              "p = subprocess.Popen([sys.executable, '-c', 'import time; x = bytearray(64 << 20); "
                              "time.sleep(30)']); time.sleep(30)"])
    try:
        s = b.Sampler(os.getpid(), 0.1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            s.sample()
            if len(b.tree(child.pid)) == 2 and max(p.peak_rss for p in s.procs.values()) > 60 << 10:
                break
            time.sleep(0.2)
        assert len(b.tree(child.pid)) == 2  # the child and its own child
        assert s.samples[-1][1] >= 64 << 10  # KiB: the grandchild's 64 MiB counted in the sum
    finally:
        for pid in b.tree(child.pid)[::-1]:
            os.kill(pid, 9)
        child.wait()
