"""The README's layout, played by an agent: a driver whose Python is ``$HOME/proj/.venv`` (a checkout
with its virtualenv inside), with the run's store, SFT data, other runs, task folders, a cache and a
``.env`` all inside the checkout, starts a real session and a sandbox, and the agent tries to read
each of them, plus ``/opt``, ``/var``, ``/sys/fs/cgroup``, ``~/.local`` and its mount table. Prints
one JSON report on stdout.

Run with the checkout's venv Python (so ``sys.prefix`` is inside the checkout):
``$HOME/proj/.venv/bin/python _layout_scenario.py --proj DIR [--ro-bind DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.runner.session import Session

AGENT = r'''
import json, os, sys
def read(path):
    try:
        if os.path.isdir(path):
            return f"listed {sorted(os.listdir(path))[:6]}"
        with open(path, "rb") as f:
            return f"read {f.read(80)!r}"
    except OSError as e:
        return f"denied: {e.strerror}"
cfg = json.load(open(sys.argv[1]))
with open("/proc/self/mountinfo") as f:
    mounts = f.read()
print(json.dumps({"reads": {k: read(p) for k, p in cfg["reads"].items()},
                  "mountinfo_shows": [k for k, p in cfg["secret_paths"].items() if p in mounts],
                  "python_ok": sys.version_info[:2] == tuple(cfg["python"])}))
'''


def targets(proj: Path, home: Path, task_dir: Path, cache: Path) -> dict[str, str]:
    """Everything of the project and the host the agent must not read."""
    return {
        "store": str(proj / "runs" / "r1" / "trajectories.db"), "run_dir": str(proj / "runs" / "r1"),
        "sft_teacher": str(proj / "runs" / "r1" / "sft" / "teacher.jsonl"),
        "other_run_store": str(proj / "runs" / "old" / "trajectories.db"), "runs": str(proj / "runs"),
        "task_verifier": str(task_dir / "verify.py"), "task_solution": str(task_dir / "solution.sh"),
        "sibling_solution": str(proj / "tasks" / "git-bugfix" / "solution.sh"), "task_root": str(proj / "tasks"),
        "sft_cache": str(cache / "sft" / "k1" / "teacher.jsonl"), "cache_models": str(cache / "models"),
        "dotenv": str(proj / ".env"), "checkout": str(proj), "local_share": str(home / ".local" / "share" / "token"),
        "opt": "/opt", "var_lib": "/var/lib", "var_log": "/var/log", "sys_cgroup": "/sys/fs/cgroup", "sys": "/sys",
    }


async def scenario(proj: Path, ro_bind: str | None) -> dict:
    home = Path(os.environ["HOME"])
    cache = Path(os.environ["OPENFORGE_CACHE"])
    env = TaskDirEnvironment(proj / "tasks")
    task = env.task("log-report")
    task_dir = Path(task.metadata["task_dir"])
    launcher = LocalLauncher(ro_binds=[ro_bind] if ro_bind else ())
    report: dict = {"sys_prefix": sys.prefix, "hidden_by_session": []}
    async with Session(ScriptedBackend({"turns": [{"text": "hi"}]}), environment=env, launcher=launcher,
                       store=proj / "runs" / "r1" / "trajectories.db") as session:
        report["hidden_by_session"] = list(launcher.hidden_paths)
        proxy = session.proxy
        h = proxy.create_rollout(task.id)
        sbx = await launcher.start(SandboxSpec(rollout_id=h.rollout_id, task=task, proxy_url=proxy.url,
                                               api_key=h.api_key, proxy_uds=proxy.agent_uds,
                                               hidden_paths=env.hidden_paths(task)))
        try:
            reads = targets(proj, home, task_dir, cache)
            secret = {k: reads[k] for k in ("task_verifier", "run_dir", "task_root", "sft_cache", "store")}
            await sbx.write_file("agent.py", AGENT.encode())
            await sbx.write_file("cfg.json", json.dumps({"reads": reads, "secret_paths": secret,
                                                         "python": list(sys.version_info[:2])}).encode())
            r = await sbx.exec([sys.executable, "agent.py", "cfg.json"], timeout_s=120)
            try:
                report["agent"] = json.loads(r.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                report["agent_failed"] = {"rc": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-2000:]}
        finally:
            await sbx.close()
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proj", required=True)
    ap.add_argument("--ro-bind", default=None)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(scenario(Path(a.proj), a.ro_bind))), flush=True)


if __name__ == "__main__":
    main()
