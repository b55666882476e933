"""Start-up cost of a scripted ``forge rollout``: the light tokenizer vs transformers' (and, optionally,
the whole command against an older source tree).

Each measurement is a fresh Python process, alternated with its baseline so machine load hits both:

* **tokenizer**: ``load_light_tokenizer("smollm2-135m")`` (the scripted back-end's path: the cached
  ``tokenizer.json`` through the Rust ``tokenizers``, no transformers/torch import) vs
  ``load_tokenizer("smollm2-135m")`` (``transformers.AutoTokenizer``, what the scripted back-end used);
* **rollout**: ``forge rollout -t files-create-hello -b reference`` end to end with this checkout, and,
  with ``--baseline-src DIR`` (e.g. ``git archive <commit> | tar -x -C DIR``), with that tree first on
  ``PYTHONPATH``.

Prints medians and the ratio baseline / new. ``python benchmarks/rollout_startup.py [-n 3]
[--baseline-src DIR]``. The SmolLM2 tokenizer cache must exist (any earlier rollout creates it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOADS = {
    "light": "from openforge.proxy.light_tokenizer import load_light_tokenizer as f; f('smollm2-135m')",
    "transformers": "from openforge.proxy.backends.transformers import load_tokenizer as f; f('smollm2-135m')",
}


def _timed(argv: list[str], src: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=tempfile.gettempdir())
    return time.perf_counter() - t


def _rollout(src: Path) -> float:
    with tempfile.TemporaryDirectory() as out:
        return _timed([sys.executable, "-m", "openforge.cli.main", "rollout", "-t", "files-create-hello", "-b",
                       "scripted:-", "--reference", "-o", out], src)


def _report(name: str, new: list[float], base: list[float], labels: tuple[str, str]) -> None:
    m_new, m_base = statistics.median(new), statistics.median(base)
    print(f"{name:10s} {labels[0]} {m_new:6.2f} s   {labels[1]} {m_base:6.2f} s   "
          f"ratio {m_base / m_new:4.1f}x   (runs: {', '.join(f'{x:.2f}' for x in new)} | "
          f"{', '.join(f'{x:.2f}' for x in base)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=3, help="runs of each (alternated)")
    ap.add_argument("--baseline-src", type=Path, help="an older source tree to time `forge rollout` against")
    a = ap.parse_args()
    light, heavy = [], []
    for _ in range(a.n):
        light.append(_timed([sys.executable, "-c", LOADS["light"]], ROOT))
        heavy.append(_timed([sys.executable, "-c", LOADS["transformers"]], ROOT))
    _report("tokenizer", light, heavy, ("light", "transformers"))
    new, base = [], []
    for _ in range(a.n):
        new.append(_rollout(ROOT))
        if a.baseline_src:
            base.append(_rollout(a.baseline_src.resolve()))
    if base:
        _report("rollout", new, base, ("this", "baseline"))
    else:
        print(f"rollout    this {statistics.median(new):6.2f} s (pass --baseline-src to compare)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
