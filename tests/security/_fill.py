"""The disk-filling attack, run as its own driver process (as a normal user): two rollouts open at
once on one small file system; the filler writes files until it cannot, then the victim's correct
solution writes its 40 MB result, the driver writes and reads the victim's files, a host-side check
reads its workdir, and a verifier's sandbox sees it. Prints one JSON report.

Usage: ``python _fill.py BASE_DIR`` (``BASE_DIR`` on the small file system).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from openforge.core.task import Resources, Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

FILL = ("i=0; while dd if=/dev/zero of=fill$i bs=1M count=16 2>/dev/null; do i=$((i+1)); [ $i -ge 40 ] && break; "
        "done; j=0; while dd if=/dev/zero of=$HOME/fill$j bs=1M count=16 2>/dev/null; do j=$((j+1)); "
        "[ $j -ge 40 ] && break; done; echo files $i $j")
SOLVE = "cat given.txt && dd if=/dev/zero of=result.bin bs=1M count=40 2>&1 | tail -1 && echo done > answer.txt && echo WROTE"


def spec(rid: str, task: Task) -> SandboxSpec:
    return SandboxSpec(rollout_id=rid, task=task, proxy_url="http://127.0.0.1:9", api_key="k")


async def _link_writes(sbx, base: Path) -> list[str]:
    """The agent leaves links to the driver's own files; the driver's writes must not follow them (through
    the keeper's root an absolute link resolves on the driver's file system)."""
    from openforge.core.errors import SandboxError

    await sbx.exec(["sh", "-c", f"ln -s {base}/outside.txt evil; ln -s {base} evildir"], timeout_s=30)
    said = []
    for rel in ("evil", "evildir/x.txt"):
        try:
            await sbx.write_file(rel, b"pwned")
            said.append("written")
        except SandboxError:
            said.append("refused")
    said += sorted(p.name for p in base.iterdir() if p.name in ("outside.txt", "x.txt"))
    return said


def free_mb(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize >> 20


async def main(base: Path) -> dict:
    launcher = LocalLauncher(base_dir=base)
    task = Task(id="t", instruction="x", resources=Resources(disk_mb=64))
    out: dict = {}
    try:
        filler, victim = await launcher.start(spec("filler", task)), await launcher.start(spec("victim", task))
        out["disk"] = [filler.disk, victim.disk]
        await victim.write_file("given.txt", b"given by setup\n")
        out["fill"] = (await filler.exec(["sh", "-c", FILL], timeout_s=120)).stdout.strip()
        out["free_mb_after_fill"] = free_mb(base)
        w = await victim.exec(["sh", "-c", SOLVE], timeout_s=60)
        out["victim"] = w.stdout + w.stderr
        out["read_back"] = (await victim.read_file("answer.txt")).decode()
        pulled = await victim.pull_workdir()
        out["pulled"] = sorted(p.name for p in pulled.iterdir())
        out["link_writes"] = await _link_writes(victim, base)
        view = await victim.verifier_view([])
        try:
            v = await view.sandbox.exec(["sh", "-c", "cat answer.txt; wc -c < result.bin"], timeout_s=60)
            out["verifier_sees"] = v.stdout.split()
            out["verifier_err"] = (v.returncode, v.stderr[-600:])
        finally:
            await view.sandbox.close()
        for s in (filler, victim):
            await s.close()
        out["left"] = sorted(p.name for p in base.iterdir())
        out["free_mb_after_close"] = free_mb(base)
    finally:
        await launcher.aclose()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))), flush=True)
