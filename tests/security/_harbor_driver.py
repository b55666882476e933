"""A Harbor task whose Dockerfile pip-installs a wheel, run by a driver process of its own (as a normal
user: each rollout's disk is then a private area only the sandboxes see): the oracle must succeed, so
the verifier's sandbox still sees what the RUN step installed. Prints one JSON report.

Usage: ``python _harbor_driver.py BASE_DIR``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "envs"))

from harbor_fixtures import make_harbor_folder

from openforge.envs.harbor import HarborEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher


async def main(base: Path) -> dict:
    env = HarborEnvironment(path=str(make_harbor_folder(base / "tasks", unsupported=False, silent=False)))
    task = env.task("greet-wheel")
    launcher = LocalLauncher(base_dir=base / "sbx")
    sbx = await launcher.start(SandboxSpec(rollout_id="hw", task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        out = await sbx.exec(["bash", "-c", env.reference_solution(task)[0]], env=env.harness_env(task, sbx),
                             cwd=sbx.workdir, timeout_s=120)
        await sbx.end_agent()
        result = await env.verify(task, sbx)
        return {"disk": sbx.disk, "solve_rc": out.returncode, "solve_err": out.stderr[-500:], "reward": result.reward}
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
        await launcher.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))))
