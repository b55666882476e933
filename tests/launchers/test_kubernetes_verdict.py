"""The verdict channel in a pod (emulated cluster, ``kcluster``): the verifier finds
``$OPENFORGE_VERDICT`` (a directory of its own in the pod) and ``$OPENFORGE_UNTRUSTED`` (the helper,
copied in with the task); what it writes to the verdict file is its verdict, not its stdout."""

from __future__ import annotations

import pytest

from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec

from .kcluster import Cluster
from .test_kubernetes_verify import make_launcher

pytestmark = pytest.mark.timeout(300)

VERIFY_SH = """\
set -u
test -f "$OPENFORGE_UNTRUSTED" || exit 2
case "$OPENFORGE_UNTRUSTED" in /tmp/openforge-verify-*) ;; *) exit 2 ;; esac
scratch=$(mktemp -d) && cp out.txt "$scratch/" && chmod -R a+rX "$scratch" && cd "$scratch" || exit 2
python3 "$OPENFORGE_UNTRUSTED" --check || exit 2
out=$(python3 "$OPENFORGE_UNTRUSTED" --timeout 20 -- cat out.txt)
echo "{\\"reward\\": $([ "$out" = 42 ] && echo 0.75 || echo 0), \\"detail\\": \\"verdict file\\"}" > "$OPENFORGE_VERDICT"
echo '{"reward": 1.0, "detail": "stdout"}'
"""


@pytest.fixture(scope="module")
def cluster():
    with Cluster() as c:
        yield c


async def test_pod_verifier_writes_its_verdict_file(cluster, tmp_path):
    d = tmp_path / "tasks" / "vfile"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('split = "train"\n')
    (d / "instruction.md").write_text("Write 42 to out.txt.\n")
    (d / "verify.sh").write_text(VERIFY_SH)
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    la = make_launcher(cluster, tmp_path, "k-vdc")
    sbx = await la.start(SandboxSpec(rollout_id="r-vdc", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        assert (await sbx.exec(["sh", "-c", "echo 42 > out.txt"], timeout_s=30)).returncode == 0
        res = await env.verify(task, sbx)
        assert (res.reward, res.detail) == (0.75, "verdict file"), res
    finally:
        await sbx.close()
        await la.aclose()
