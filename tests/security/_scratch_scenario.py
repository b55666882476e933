"""One rollout's disk budget and the directories the driver binds from it, run as its own driver process
(as root, or as a normal user, whose rollout disk is a private area). Prints one JSON report.

* **one budget**: with 5 MB in the workdir, one command tries to hold 1.5 MB in each of ``/tmp``,
  ``/var/tmp``, ``/run`` and ``/dev/shm`` at once (11 MB in all, of a ``disk_mb`` of 8);
* **fresh scratch**: what one command leaves in ``/tmp`` is gone for the next, and its space with it;
* **swapped binds**: between two commands the agent replaces a directory the driver binds by a link to
  a host directory it cannot see (the workdir shown at ``/app``; the ``places`` directory of a fresh
  ``/data``; the next command's scratch directory, planted ahead); the next command must not show it;
* **no descriptor** of the driver's reaches the command.

Usage: ``python _scratch_scenario.py BASE_DIR``.
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

HOLD = ("for d in /tmp /var/tmp /run /dev/shm; do head -c 1500000 /dev/zero > $d/held || "
        "{ echo stopped at $d; exit 9; }; done; echo held all")
FDS = "for f in /proc/$$/fd/*; do readlink $f; done"


def spec(rid: str, disk_mb: int = 8) -> SandboxSpec:
    return SandboxSpec(rollout_id=rid, task=Task(id="t", instruction="x", resources=Resources(disk_mb=disk_mb)),
                       proxy_url="", api_key="k")


async def sh(sbx, script: str, **kw) -> tuple[int | None, str]:
    r = await sbx.exec(["sh", "-c", script], timeout_s=60, **kw)
    return r.returncode, (r.stdout + r.stderr).strip()


async def budget(launcher: LocalLauncher) -> dict:
    async with await launcher.start(spec("budget")) as sbx:
        out: dict = {"disk": sbx.disk}
        out["workdir"] = await sh(sbx, "head -c 5000000 /dev/zero > big && echo ok")
        out["hold"] = await sh(sbx, HOLD)
        out["leftover"] = sorted(p.name for p in sbx._h(sbx.root).iterdir() if p.name.startswith(".scratch"))
        return out


async def fresh(launcher: LocalLauncher) -> dict:
    async with await launcher.start(spec("fresh")) as sbx:
        out = {"first": await sh(sbx, "head -c 6000000 /dev/zero > /tmp/x && echo /tmp took 6 MB")}
        out["second"] = await sh(sbx, "ls /tmp; head -c 6000000 /dev/zero > big && echo workdir took 6 MB")
        return out


PLANTS = {  # run in the rollout's directory; each leaves a link where the driver binds a directory from
    "workdir at /app": "mv work work.real && ln -s {secret} work",
    "fresh /data": "mkdir p2 && ln -s {secret} p2/0 && ln -s {secret} p2/1 && mv places places.real && mv p2 places",
    "next scratch": ("n=0; while [ -e .scratch-$n ]; do n=$((n+1)); done; "
                     "for k in 0 1 2 3; do ln -s {secret} .scratch-$((n+k)); done"),
}


async def swap(launcher: LocalLauncher, secret: Path, plant: str) -> dict:
    async with await launcher.start(spec("swap", disk_mb=64)) as sbx:
        sbx.place("/app", sbx.workdir)
        sbx.place("/data")
        out = {"plant": await sh(sbx, plant.format(secret=secret) + " && echo planted", cwd=sbx.root)}
        out["after"] = await sh(sbx, "cat /app/key.txt /data/key.txt /tmp/key.txt; echo end",
                                cwd=sbx.root)
        return out


async def descriptors(launcher: LocalLauncher) -> dict:
    async with await launcher.start(spec("fds", disk_mb=64)) as sbx:
        sbx.place("/app", sbx.workdir)
        sbx.place("/data")
        return {"fds": await sh(sbx, FDS), "root": str(sbx.root)}


async def main(base: Path) -> dict:
    secret = base / "secret" / "keys"
    secret.mkdir(parents=True)
    (secret / "key.txt").write_text("ANSWER-KEY\n")
    for d in (secret, secret.parent):
        d.chmod(0o755)
    (secret / "key.txt").chmod(0o644)
    launcher = LocalLauncher(base_dir=base / "sbx")
    try:
        report = {"budget": await budget(launcher), "fresh": await fresh(launcher)}
        report["swaps"] = {name: await swap(launcher, secret, plant) for name, plant in PLANTS.items()}
        report["descriptors"] = await descriptors(launcher)
        report["secret_dir_after"] = sorted(p.name for p in secret.iterdir())
        return report
    finally:
        await launcher.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1]).absolute()))))
    sys.stdout.flush()
    os._exit(0)
