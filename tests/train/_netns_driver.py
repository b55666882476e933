"""A veRL launch in the loopback namespace, cut short of training, as its own driver process (so the test
can run it as a normal user): ``launch`` mode goes through :func:`openforge.train.verl.launch.launch` with
an interpreter stub in place of ``python -m verl.trainer.main_ppo``; the stub runs ``rollout`` mode there,
which starts the launcher the agent loop would (from the ``agent_loops.yaml`` the launch wrote) and runs
one sandboxed command in it. The last stdout line is a JSON report.

    python _netns_driver.py launch BASE HOST PORT
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import sys
from pathlib import Path


def launch(base: Path, host: str, port: str) -> dict:
    from openforge.config import RunConfig
    from openforge.core.task import Task
    from openforge.train.verl.launch import launch as verl_launch

    report = base / "rollout.json"
    stub = base / "main_ppo"  # takes the place of the interpreter: `stub -m verl.trainer.main_ppo ...`
    stub.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in (
        sys.executable, __file__, "rollout", str(base / "run" / "verl" / "agent_loops.yaml"), str(report), host, port))
        + "\n")
    stub.chmod(0o755)
    cfg = RunConfig.model_validate({
        "model": {"name": str(base / "no-model")},  # handed to veRL unchanged: nothing is converted
        "trainer": {"backend": "verl", "verl": {"loss_agg": "token-mean", "device": "cpu", "network": "loopback"}},
        "launcher": {"name": "local", "options": {"base_dir": str(base / "sandboxes")}},
    })
    res = verl_launch(cfg, base / "run", [Task(id="t0", instruction="do", environment="claw")], python=str(stub))
    out = json.loads(report.read_text()) if report.is_file() else {}
    return {"rc": res["rc"], "command": res["command"], "driver_uid": os.geteuid(), **out}


async def _rollout(loops_yaml: str) -> dict:
    import yaml

    from openforge.core.task import Task
    from openforge.launchers.base import SandboxSpec
    from openforge.runner.parts import load_launcher

    entry = yaml.safe_load(Path(loops_yaml).read_text())[0]
    launcher = load_launcher(entry["launcher"], entry["launcher_options"])
    try:
        sbx = await launcher.start(SandboxSpec(rollout_id="r0", task=Task(id="t0", instruction="do"),
                                               proxy_url="", api_key=""))
        r = await sbx.exec(["sh", "-c", "id -u; echo written > out.txt"])
        written = (await sbx.pull_workdir()) / "out.txt"  # the workdir on the host (a copy: a private area)
        owner = written.stat().st_uid if written.is_file() else None
        return {"sandbox_rc": r.returncode, "sandbox_stdout": r.stdout, "sandbox_stderr": r.stderr[-2000:],
                "file": (await sbx.read_file("out.txt")).decode() if owner is not None else None,
                "file_owner": owner}
    finally:
        await launcher.aclose()


def rollout(loops_yaml: str, report: str, host: str, port: str) -> None:
    out: dict = {"ns_uid": os.geteuid(), "ns_interfaces": sorted(n for _, n in socket.if_nameindex())}
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        out["reached_host"] = True
    except OSError as e:
        out["reached_host"] = type(e).__name__
    try:
        out.update(asyncio.run(_rollout(loops_yaml)))
    except Exception as e:  # the report says what failed; the test shows it
        out["error"] = f"{type(e).__name__}: {e}"[:3000]
    Path(report).write_text(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        print(json.dumps(launch(Path(sys.argv[2]), sys.argv[3], sys.argv[4])))
    else:
        rollout(*sys.argv[2:6])
