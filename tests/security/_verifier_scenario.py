"""Hostile verifier attacks run by a driver process of its own (so the driver can be a normal user):
in the shipped log-report and git-bugfix tasks, an agent links its report to the driver's 0600
credentials and sets ``core.fsmonitor`` in its repository, then the real verifier runs. Prints one
JSON report on stdout.

Usage: ``python _verifier_scenario.py --work DIR`` (HOME must hold ``.secret-credentials``).
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


async def attack(env: TaskDirEnvironment, launcher: LocalLauncher, task_id: str, agent: str) -> dict:
    task = env.task(task_id)
    sbx = await launcher.start(SandboxSpec(rollout_id=task_id, task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        r = await sbx.exec(["bash", "-c", agent], timeout_s=60)
        res = await env.verify(task, sbx)
        return {"agent_rc": r.returncode, "reward": res.reward, "verdict": res.model_dump_json()}
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def main(work: Path) -> dict:
    tasks = work / "tasks"
    for t in ("log-report", "git-bugfix"):
        shutil.copytree(EXAMPLES / t, tasks / t)
    env = TaskDirEnvironment(tasks, log_dir=work / "logs")
    launcher = LocalLauncher(base_dir=work / "sbx")
    secret = Path(os.environ["HOME"]) / ".secret-credentials"
    marker = work / "pwned"
    try:
        link = await attack(env, launcher, "log-report", f"mkdir -p report && ln -s {secret} report/summary.md")
        fsm = await attack(env, launcher, "git-bugfix", f"cd calc && git config core.fsmonitor 'id -u > {marker}; echo' "
                                                        "&& git commit -q --allow-empty -m 'fix: nothing'")
    finally:
        await launcher.aclose()
    return {"driver_uid": os.getuid(), "isolation": launcher.isolation, "link": link, "fsmonitor": fsm,
            "marker": marker.read_text().strip() if marker.exists() else None, "secret": secret.read_text()}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    print(json.dumps(asyncio.run(main(Path(p.parse_args().work)))))
