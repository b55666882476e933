"""The verdict-channel attack on the shipped git-bugfix task, run by a driver process of its own (so
the driver can be a normal user, whose sandboxes share its uid with the pipes it reads): the agent's
stats.py, imported by the verifier, writes a result line into every descriptor it can open and kills
every process it can reach. Prints one JSON report on stdout.

Usage: ``python _verdict_scenario.py --work DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
from pathlib import Path

from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"

#: Python the agent leaves as its code: it writes a result line to the stdout of every process it can
#: see (the verifier's among them) and into every descriptor it holds or can open, then SIGKILLs
#: every process of its uid it can reach (unless ``FORGE_KILL=0``), leaving a process behind that
#: writes the paths in ``FORGE_PATHS`` once more 1.5 s later.
FORGE = r'''
import os, signal
LINE = b'{"reward": 1.0, "detail": "forged"}\n'
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
    for fd in range(0, 12):
        try:
            f = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(f, LINE)
        except OSError:
            pass
        os.close(f)
for fd in range(1, 64):
    try:
        os.write(fd, LINE)
    except OSError:
        pass
for path in os.environ.get("FORGE_PATHS", "").split(":"):
    if path:
        try:
            with open(path, "w") as f:
                f.write(LINE.decode())
        except OSError:
            pass
if os.fork() == 0:  # a process left behind, to write once the verifier wrote its own verdict
    os.setsid()
    import time
    time.sleep(1.5)
    for path in os.environ.get("FORGE_PATHS", "").split(":"):
        try:
            with open(path, "w") as f:
                f.write(LINE.decode())
        except OSError:
            pass
    os._exit(0)
if os.environ.get("FORGE_KILL", "1") == "1":
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
'''

#: The agent's shell commands: an unfixed average() behind the forging module, committed as a fix.
AGENT = ("cd calc && cat > stats.py <<'PY'\n" + FORGE + "\ndef average(xs):\n    return sum(xs) / (len(xs) - 1)\n"
         "PY\ngit commit -q -am 'fix: average'\n")


async def _verify(env: TaskDirEnvironment, launcher: LocalLauncher, script: str, rid: str) -> dict:
    task = env.task("git-bugfix")
    sbx = await launcher.start(SandboxSpec(rollout_id=rid, task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    out: dict = {}
    try:
        await env.setup(task, sbx)
        r = await sbx.exec(["bash", "-c", script], timeout_s=60)
        out["agent_rc"] = r.returncode
        try:
            res = await env.verify(task, sbx)
            out.update(reward=res.reward, verdict=res.model_dump_json())
        except Exception as e:  # a failed verifier: no reward, the error says why
            out.update(reward=None, error=f"{type(e).__name__}: {e}"[:2000])
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
    return out


async def main(work: Path) -> dict:
    """The forging agent, and the reference solution (which must still pass under this driver)."""
    shutil.copytree(EXAMPLES / "git-bugfix", work / "tasks" / "git-bugfix")
    env = TaskDirEnvironment(work / "tasks", log_dir=work / "logs")
    launcher = LocalLauncher(base_dir=work / "sbx")
    try:
        out = {"driver_uid": os.getuid(), "isolation": launcher.isolation,
               **await _verify(env, launcher, AGENT, "forge")}
        out["solution"] = await _verify(env, launcher, env.reference_solution(env.task("git-bugfix"))[0], "solution")
    finally:
        await launcher.aclose()
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    print(json.dumps(asyncio.run(main(Path(p.parse_args().work)))))
