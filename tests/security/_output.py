"""The unbounded-output attack, run as its own driver process (as root, or as a normal user): the
agent prints 300 MB to its stdout and writes 300 MB more into its parent's stdout
(``/proc/$PPID/fd/1``, the pipe to the driver). Prints one JSON report with the driver's peak memory.

Usage: ``python _output.py BASE_DIR``.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

from openforge.core.task import Resources, Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

FLOOD = "head -c 300000000 /dev/zero | tr '\\0' a; head -c 300000000 /dev/zero | tr '\\0' b > /proc/$PPID/fd/1; echo; echo END"


async def main(base: Path) -> dict:
    launcher = LocalLauncher(base_dir=base)
    task = Task(id="t", instruction="x", resources=Resources(memory_mb=512))
    async with await launcher.start(SandboxSpec(rollout_id="out", task=task, proxy_url="http://127.0.0.1:9",
                                                api_key="k")) as sbx:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        r = await sbx.exec(["sh", "-c", FLOOD], timeout_s=120)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    await launcher.aclose()
    return {"rc": r.returncode, "stdout_len": len(r.stdout), "tail": r.stdout[-20:], "head": r.stdout[:5],
            "dropped": getattr(r, "output_dropped", None), "says_dropped": "bytes of output dropped" in r.stdout,
            "rss_before_mb": before, "rss_peak_mb": peak}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))), flush=True)
