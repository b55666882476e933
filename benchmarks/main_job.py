"""Profile the main job (README command 1, ``forge recipe claw-grpo``) or any recipe preset: wall time
per phase and peak memory per process and summed over the whole process tree.

Runs ``forge recipe RECIPE [--preset P] [overrides...]`` as a child process and, every ``--interval``
seconds, walks ``/proc`` for every descendant of it (harness processes, sandboxes, services), reading
each one's RSS (``VmRSS``) and PSS (``smaps_rollup``: shared pages divided among their sharers, so the
sum is what the tree really holds). Phases are cut from the job's own log lines as they arrive:

    load        until "model ... loaded"
    before      "held-out before"      (the untrained policy; "cached" when the cache had it)
    sft         "SFT warm-start"       (teacher rollouts + supervised steps, or the cached weights)
    warmstart   "held-out warmstart"   (the policy GRPO starts from)
    step N      "step N/M: rolling out" .. (rollouts with dynamic sampling + the optimizer step)
    after       "held-out after"       (the final policy) .. the job's exit

By default the job gets a fresh ``cache_dir`` (a temporary directory) so the warm-start and the
untrained point are measured, as in a fresh clone (the converted model stays cached);
``--keep-cache`` uses the configured cache instead.

    python benchmarks/main_job.py                                   # the main job, fresh caches
    python benchmarks/main_job.py --preset test                     # the CI preset
    python benchmarks/main_job.py -- trainer.steps=1                # overrides after --
    python benchmarks/main_job.py --json benchmarks/results/main_job.json

Prints a markdown table (phase, seconds, peak RSS summed, peak PSS summed, processes) and the top
processes by peak RSS. Heavy: run it under the shared lock (``flock /tmp/openforge-heavy.lock ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHASES: list[tuple[str, re.Pattern[str]]] = [
    ("before", re.compile(r"held-out before")),
    ("sft", re.compile(r"SFT warm-start")),
    ("warmstart", re.compile(r"held-out warmstart")),
    ("step", re.compile(r"step (\d+)/\d+: rolling out")),
    ("after", re.compile(r"held-out after")),
]
LOADED = re.compile(r"model .* loaded in")
GIB = 1 << 30


# ------------------------------------------------------------------------------------ /proc


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(root: int) -> list[int]:
    """``root`` and every descendant of it now."""
    kids = _children_map()
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _kib(path: str, key: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    exe = Path(argv[0]).name
    rest = [a for a in argv[1:] if not a.startswith("-")][:3]
    return " ".join([exe, *(Path(a).name if "/" in a else a for a in rest)])[:60]


@dataclass
class Proc:
    pid: int
    name: str
    peak_rss: int = 0  # KiB
    peak_pss: int = 0


@dataclass
class Sampler:
    """Samples the tree under ``root`` every ``interval`` s until stopped."""

    root: int
    interval: float
    procs: dict[int, Proc] = field(default_factory=dict)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)  # t, rss, pss, nprocs (KiB)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        rss_sum = pss_sum = n = 0
        for pid in tree(self.root):
            rss = _kib(f"/proc/{pid}/status", "VmRSS:")
            if rss is None:
                continue
            pss = _kib(f"/proc/{pid}/smaps_rollup", "Pss:") or 0
            p = self.procs.get(pid)
            if p is None:
                p = self.procs[pid] = Proc(pid, _name(pid))
            p.peak_rss, p.peak_pss = max(p.peak_rss, rss), max(p.peak_pss, pss)
            rss_sum, pss_sum, n = rss_sum + rss, pss_sum + pss, n + 1
        self.samples.append((time.monotonic(), rss_sum, pss_sum, n))

    def run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()


# ------------------------------------------------------------------------------------ phases


def phase_of(line: str) -> str | None:
    for name, rx in PHASES:
        m = rx.search(line)
        if m:
            return f"step {m.group(1)}" if name == "step" else name
    return None


def cut_phases(marks: list[tuple[float, str]], t0: float, t_end: float) -> list[tuple[str, float, float]]:
    """``(phase, start, end)`` from the time each phase's first log line came (``load`` before the first)."""
    out: list[tuple[str, float, float]] = []
    names = ["load", *(m[1] for m in marks)]
    starts = [t0, *(m[0] for m in marks)]
    ends = [*starts[1:], t_end]
    for name, s, e in zip(names, starts, ends):
        out.append((name, s, e))
    return out


def phase_rows(phases: list[tuple[str, float, float]], samples: list[tuple[float, int, int, int]],
               cached: set[str]) -> list[dict[str, Any]]:
    rows = []
    for name, s, e in phases:
        inside = [x for x in samples if s <= x[0] <= e] or [min(samples, key=lambda x: abs(x[0] - s))] \
            if samples else []
        rows.append({"phase": name + (" (cached)" if name in cached else ""), "seconds": round(e - s, 1),
                     "peak_rss_gib": round(max((x[1] for x in inside), default=0) / (1 << 20), 2),
                     "peak_pss_gib": round(max((x[2] for x in inside), default=0) / (1 << 20), 2),
                     "max_procs": max((x[3] for x in inside), default=0)})
    return rows


# ------------------------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="claw-grpo")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between /proc samples")
    ap.add_argument("--keep-cache", action="store_true", help="use the configured cache (default: a fresh one)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--log", type=Path, default=None, help="copy the job's output here")
    ap.add_argument("overrides", nargs="*", help="recipe overrides (key=value), after --")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="main-job-")
    cmd = [sys.executable, "-m", "openforge.cli.main", "recipe", args.recipe]
    if args.preset:
        cmd += ["--preset", args.preset]
    over = [*args.overrides, f"run_dir={tmp}/run"]
    if not args.keep_cache:
        over.append(f"cache_dir={tmp}/cache")
    cmd += over
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env={**os.environ, "COLUMNS": "200"})
    sampler = Sampler(proc.pid, args.interval)
    th = threading.Thread(target=sampler.run, daemon=True)
    th.start()
    marks: list[tuple[float, str]] = []
    cached: set[str] = set()
    log_lines: list[str] = []
    t_loaded = None
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic()
        sys.stderr.write(line)
        log_lines.append(f"{now - t0:8.1f} {line}")
        if t_loaded is None and LOADED.search(line):
            t_loaded = now
        ph = phase_of(line)
        if ph and ph not in {m[1] for m in marks}:
            marks.append((now, ph))
        if "cached" in line and marks and marks[-1][1] in ("before", "sft", "warmstart"):
            cached.add(marks[-1][1])
    rc = proc.wait()
    t_end = time.monotonic()
    sampler.stop()
    th.join()
    if args.log:
        args.log.write_text("".join(log_lines))
    rows = phase_rows(cut_phases(marks, t0, t_end), sampler.samples, cached)
    peak_rss = max((x[1] for x in sampler.samples), default=0) / (1 << 20)
    peak_pss = max((x[2] for x in sampler.samples), default=0) / (1 << 20)
    procs = sorted(sampler.procs.values(), key=lambda p: -p.peak_rss)
    print(f"\n## {args.recipe}{' --preset ' + args.preset if args.preset else ''} "
          f"({' '.join(args.overrides) or 'no overrides'}): exit {rc}, {t_end - t0:.0f} s, "
          f"peak RSS summed over the tree {peak_rss:.2f} GiB (PSS {peak_pss:.2f} GiB)\n")
    print("| phase | s | peak RSS Σ GiB | peak PSS Σ GiB | processes |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['phase']} | {r['seconds']:.0f} | {r['peak_rss_gib']:.2f} | {r['peak_pss_gib']:.2f} | "
              f"{r['max_procs']} |")
    print(f"| **total** | {t_end - t0:.0f} | {peak_rss:.2f} | {peak_pss:.2f} | {len(sampler.procs)} seen |")
    print("\ntop processes by peak RSS:\n\n| pid | process | peak RSS MiB | peak PSS MiB |\n|---:|---|---:|---:|")
    for p in procs[:12]:
        print(f"| {p.pid} | `{p.name}` | {p.peak_rss / 1024:.0f} | {p.peak_pss / 1024:.0f} |")
    if t_loaded is not None:
        print(f"\nmodel loaded {t_loaded - t0:.1f} s after start")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "recipe": args.recipe, "preset": args.preset, "overrides": args.overrides, "exit": rc,
            "wall_s": round(t_end - t0, 1), "peak_rss_gib": round(peak_rss, 2), "peak_pss_gib": round(peak_pss, 2),
            "phases": rows, "run_dir": f"{tmp}/run",
            "processes": [{"pid": p.pid, "name": p.name, "peak_rss_mib": round(p.peak_rss / 1024),
                           "peak_pss_mib": round(p.peak_pss / 1024)} for p in procs[:30]],
            "timeline": [[round(t - t0, 1), rss, pss, n] for t, rss, pss, n in sampler.samples[::4]],
        }, indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
