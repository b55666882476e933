"""A driver process for the leak tests: starts a sandbox running a long-lived process tree, prints
what it created, then waits to be killed / interrupted / to raise (argv[2])."""

import asyncio
import sys

from openforge.core.task import Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher


async def main(base: str, how: str) -> None:
    launcher = LocalLauncher(base_dir=base, isolation=sys.argv[3] if len(sys.argv) > 3 else "auto")
    spec = SandboxSpec(rollout_id="leak", task=Task(id="t", instruction="x"), proxy_url="http://127.0.0.1:1",
                       api_key="k")
    try:
        async with await launcher.start(spec) as sbx:
            cmd = "sleep 1013 & echo $! > pids; sleep 1013 & echo $! >> pids; exec sleep 1013"
            task = asyncio.create_task(sbx.exec(["sh", "-c", cmd], timeout_s=1000))
            while not (sbx.workdir / "pids").exists() or len((sbx.workdir / "pids").read_text().split()) < 2:
                await asyncio.sleep(0.05)
            print(sbx.root, flush=True)
            if how == "raise":
                await asyncio.sleep(0.3)
                raise RuntimeError("driver failed")
            await task
    finally:
        await launcher.aclose()


asyncio.run(main(sys.argv[1], sys.argv[2]))
