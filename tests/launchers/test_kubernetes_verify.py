"""The Kubernetes launcher's verifier side (emulated cluster, ``kcluster``): a task directory's
verifier runs in the rollout's pod, in the pod's workdir, never on a copy pulled to the driver; and
what ``pull_workdir`` does copy out of a pod is bounded, packed and unpacked (an ``env_error``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxFailure, SandboxSpec
from openforge.task import Resources, Task
from openforge.types import RolloutStatus as S

from .kcluster import Cluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    with Cluster() as c:
        yield c


def make_launcher(cluster, tmp_path, run_id, **kw):
    from openforge.launchers.kubernetes import KubernetesLauncher

    return KubernetesLauncher(host=cluster.url, run_id=run_id, workdir=str(tmp_path / "pods/{pod}/work"),
                              home=str(tmp_path / "pods/{pod}/home"), **kw)


VIEW_PY = """
import json, os, sys
print(json.dumps({"reward": float(open("out.txt").read().strip() == "42"), "cwd": os.getcwd(),
                  "workdir": os.environ["OPENFORGE_WORKDIR"], "task_dir": os.environ["OPENFORGE_TASK_DIR"],
                  "home": os.environ["HOME"], "pythonpath": os.environ.get("PYTHONPATH"),
                  "seed": open(os.path.join(os.environ["OPENFORGE_TASK_DIR"], "seed.txt")).read().strip()}))
"""


async def test_task_dir_verifier_runs_in_the_pod(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep + "/nonexistent")
    d = tmp_path / "tasks" / "inpod"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('split = "train"\n')
    (d / "instruction.md").write_text("Write 42 to out.txt.\n")
    (d / "verify.py").write_text(VIEW_PY)
    (d / "seed.txt").write_text("from the task dir\n")
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    la = make_launcher(cluster, tmp_path, "k-vfy")
    sbx = await la.start(SandboxSpec(rollout_id="r-inpod", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        r = await sbx.exec(["sh", "-c", "echo 42 > out.txt"], timeout_s=30)
        assert r.returncode == 0, r.stderr
        res = await env.verify(task, sbx)
        m = res.metadata
        assert res.reward == 1.0 and m["cwd"] == m["workdir"] == str(sbx.workdir), "the pod's own workdir"
        assert sbx._local is None, "nothing was pulled to the driver"
        assert m["task_dir"] != str(d) and m["task_dir"].startswith("/tmp/openforge-verify-"), "a copy in the pod"
        assert m["seed"] == "from the task dir" and m["pythonpath"] is None
        assert not Path(m["task_dir"]).exists(), "the verifier's copy is removed from the pod afterwards"
    finally:
        await sbx.close()
        await la.aclose()


@pytest.mark.parametrize("what, cmd, where", [
    ("incompressible", "head -c 3000000 /dev/urandom > big.bin", "as sent"),  # never read whole
    ("a small archive of zeros", "head -c 30000000 /dev/zero > zeros.bin", "unpacked"),
])
async def test_pull_workdir_is_bounded(cluster, tmp_path, what, cmd, where):
    la = make_launcher(cluster, tmp_path, f"k-cap-{len(what)}", max_workdir_mb=1)
    task = Task(id="t", instruction="x", resources=Resources(cpu=1, memory_mb=512))
    sbx = await la.start(SandboxSpec(rollout_id=f"r-cap-{len(what)}", task=task, proxy_url="http://127.0.0.1:9",
                                     api_key="k"))
    try:
        assert (await sbx.exec(["sh", "-c", cmd], timeout_s=60)).returncode == 0
        with pytest.raises(SandboxFailure, match=rf"\({where}\) is larger than 1 MB") as e:
            await sbx.pull_workdir()
        assert e.value.status == S.ENV_ERROR
        assert not list((sbx._local or tmp_path / "none").rglob("*.bin")), f"{what}: nothing unpacked"
    finally:
        await sbx.close()
        await la.aclose()
