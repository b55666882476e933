"""The deep-directory attack, run as its own driver process (as root, or as a normal user): an agent
nests 1,500 directories (some of them mode 000) in its rollout and turns its dir's ``.owner`` into
a FIFO; the sandbox is closed; then leftovers of a driver that died (same shape, a dead owner pid)
sit in the shared base directory and a new launcher starts on it. Prints one JSON report.

Usage: ``python _deep.py BASE_DIR``. Dies of SIGALRM (no report) if anything hangs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from openforge.core.task import Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

NEST = ("i=0; while [ $i -lt 1500 ]; do mkdir d && cd d || exit 1; i=$((i+1)); "
        "[ $((i % 300)) -eq 0 ] && mkdir locked && echo x > locked/f && chmod 000 locked; done; echo nested $i")


def dead_pid() -> int:
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def leftover(base: Path, name: str, *, fifo_owner: bool) -> Path:
    """A sandbox dir of a driver that died: 1,500 nested dirs, its ``.owner`` a dead pid (or a FIFO)."""
    d = base / name
    d.mkdir()
    fd = os.open(d, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    if fifo_owner:
        os.mkfifo(d / ".owner")
    else:
        (d / ".owner").write_text(str(dead_pid()))
    return d


async def main(base: Path) -> dict:
    report: dict = {"driver_uid": os.getuid()}
    launcher = LocalLauncher(base_dir=base)
    sbx = await launcher.start(SandboxSpec(rollout_id="deep", task=Task(id="t", instruction="x"),
                                           proxy_url="http://127.0.0.1:9", api_key="k"))
    r = await sbx.exec(["sh", "-c", NEST], timeout_s=120)
    report["agent"] = r.stdout.strip() or r.stderr[-300:]
    try:
        await sbx.close()
        report["close"] = "ok"
    except BaseException as e:  # the report says what went wrong
        report["close"] = f"{type(e).__name__}: {e}"[:300]
    report["rollout_dir_left"] = sbx.root.exists()
    await launcher.aclose()
    stale = [leftover(base, "stale-deep", fifo_owner=False), leftover(base, "stale-fifo", fifo_owner=True)]
    try:
        later = LocalLauncher(base_dir=base)
        report["later_launcher"] = "ok"
        s2 = await later.start(SandboxSpec(rollout_id="later", task=Task(id="t", instruction="x"),
                                           proxy_url="http://127.0.0.1:9", api_key="k"))
        report["later_exec"] = (await s2.exec(["echo", "fine"], timeout_s=30)).stdout.strip()
        await s2.close()
        await later.aclose()
    except BaseException as e:
        report["later_launcher"] = f"{type(e).__name__}: {e}"[:300]
    report["stale_left"] = [d.name for d in stale if d.exists()]
    return report


if __name__ == "__main__":
    signal.alarm(120)
    sys.setrecursionlimit(1000)  # the interpreter's default, whatever the test runner set
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))), flush=True)
