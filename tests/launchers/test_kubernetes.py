"""Kubernetes launcher: manifests as data; the client flow with the real `kubernetes` client against
kmock (an HTTP-level API emulator) plus a fake kubelet that really runs the pod's agent locally."""

from __future__ import annotations

import asyncio
import os

import pytest

from openforge.core.errors import SandboxError, SandboxFileNotFound, SandboxFileRefused
from openforge.core.task import Resources, Task
from openforge.core.types import RolloutStatus as S
from openforge.launchers.base import SandboxSpec
from openforge.launchers.k8s_checks import same_quantities
from openforge.launchers.k8s_manifests import (
    AGENT_PORT,
    build_network_policy,
    build_pod_manifest,
    build_secret,
    classify_pod,
)

pytest.importorskip("kubernetes")
pytest.importorskip("kmock")
from testdeps import smollm2_tokenizer

from .kcluster import Cluster


def pod(**kw):
    base = dict(name="of-r1", namespace="ns", image="img:1", rollout_id="r1", run_id="run", task_id="t", secret_name="of-r1",
                proxy_url="http://proxy.ns.svc:8765")
    return build_pod_manifest(**{**base, **kw})


# -- manifests as data ---------------------------------------------------------------------------

def test_pod_manifest_is_locked_down():
    m = pod(cpu=2.0, memory_mb=2048, deadline_s=900, env={"A": "1"})
    spec, c = m["spec"], m["spec"]["containers"][0]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 900
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                    "readOnlyRootFilesystem": False}
    assert same_quantities(c["resources"]["requests"], {"cpu": "2000m", "memory": "2048Mi", "ephemeral-storage": "4Gi"})
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "2", "memory": "2Gi",  # as servers store them
                                                                       "ephemeral-storage": "4Gi"}
    assert c["command"][:3] == ["python3", "-I", "-c"] and "ThreadingHTTPServer" in c["command"][3]
    env = {e["name"]: e for e in c["env"]}
    assert env["OPENFORGE_PROXY_URL"]["value"] == "http://proxy.ns.svc:8765" and env["A"]["value"] == "1"
    assert env["OPENFORGE_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "of-r1", "key": "api-key"}
    assert "value" not in env["OPENFORGE_AGENT_TOKEN"]  # secrets never inline
    assert m["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "openforge"
    assert m["metadata"]["labels"]["openforge.dev/run"] == "run" and m["metadata"]["namespace"] == "ns"


def test_labels_are_valid_kubernetes_names():
    m = pod(rollout_id="Ro_LL/out" * 20, task_id="Claw:Task.1")
    for v in m["metadata"]["labels"].values():
        assert len(v) <= 63 and v == v.lower() and v[0].isalnum() and v[-1].isalnum()


def test_network_policy_default_deny_except_proxy():
    p = build_network_policy(name="np", namespace="ns", run_id="run", proxy_port=8765, proxy_cidr="10.0.0.5")
    assert p["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert p["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}], "ports": [{"protocol": "TCP", "port": 8765}]}]
    assert p["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": AGENT_PORT}]}]
    p = build_network_policy(name="np", namespace="ns", run_id="run", proxy_port=80, proxy_pod_labels={"app": "proxy"},
                             proxy_namespace="forge", allow_dns=True)
    assert p["spec"]["egress"][0]["to"][0] == {"podSelector": {"matchLabels": {"app": "proxy"}},
                                               "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "forge"}}}
    assert p["spec"]["egress"][1]["ports"][0] == {"protocol": "UDP", "port": 53}
    with pytest.raises(ValueError, match="proxy_cidr or proxy_pod_labels"):
        build_network_policy(name="np", namespace="ns", run_id="r", proxy_port=1)
    s = build_secret(name="s", namespace="ns", run_id="r", api_key="k", agent_token="t")
    assert s["stringData"] == {"api-key": "k", "agent-token": "t"}


def test_the_pods_ephemeral_storage_is_the_rollouts_disk_mb():
    """One disk budget on Kubernetes too: workdir, home, /tmp (emptyDirs) and the writable layer count
    in the pod's ephemeral-storage, which is the task's ``disk_mb``."""
    from openforge.launchers.k8s_manifests import PodResources

    kw = dict(name="of-x", namespace="default", image="img", rollout_id="r", run_id="k", task_id="t", secret_name="s",
              proxy_url="http://127.0.0.1:9")
    for disk_mb, quantity in ((64, "64Mi"), (8192, "8Gi")):
        c = build_pod_manifest(**kw, resources=PodResources(disk_mb=disk_mb))["spec"]["containers"][0]
        assert c["resources"]["limits"]["ephemeral-storage"] == c["resources"]["requests"]["ephemeral-storage"] == quantity


@pytest.mark.parametrize(("status", "expected"), [
    ({"phase": "Pending"}, ("pending", None)),
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, ("ready", None)),
    ({"phase": "Pending", "containerStatuses": [{"image": "x", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]},
     ("failed", S.ENV_ERROR)),
    ({"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}, ("failed", S.ENV_ERROR)),
    ({"phase": "Failed", "reason": "Evicted"}, ("failed", S.INFRA_ERROR)),
    # past its own ephemeral-storage (the rollout's disk_mb): what the agent wrote, the policy's failure
    ({"phase": "Failed", "reason": "Evicted", "message": "Pod ephemeral local storage usage exceeds the total limit "
      "of containers 64Mi. "}, ("failed", S.POLICY_FAILURE)),
    ({"phase": "Failed", "reason": "Evicted", "message": 'Usage of EmptyDir volume "work" exceeds the limit "64Mi". '},
     ("failed", S.POLICY_FAILURE)),
    ({"phase": "Failed", "reason": "Evicted", "message": 'Container rollout exceeded its local ephemeral storage '
      'limit "64Mi". '}, ("failed", S.POLICY_FAILURE)),
    # the node's disk, not the pod's limit: infrastructure
    ({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: ephemeral-storage. Threshold "
      "quantity: 1Gi, available: 512Mi. Container rollout was using 10Gi, request is 4Gi, has larger consumption of "
      "ephemeral-storage. "}, ("failed", S.INFRA_ERROR)),
    ({"phase": "Running", "containerStatuses": [{"state": {"terminated": {"reason": "OOMKilled"}}}]}, ("failed", S.INFRA_ERROR)),
    ({"phase": "Unknown"}, ("failed", S.INFRA_ERROR)),
    ({"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True"}]}, ("failed", S.INFRA_ERROR)),
    ({"phase": "Failed", "reason": "DeadlineExceeded"}, ("failed", S.TIMEOUT)),
])
def test_pod_phase_to_status(status, expected):
    state, st, reason = classify_pod({"status": status})
    assert (state, st) == expected
    assert st is None or reason


# -- the client flow against the emulator --------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    with Cluster() as c:
        yield c


def make_launcher(cluster, tmp_path, run_id="k1", **kw):
    from openforge.launchers.kubernetes import KubernetesLauncher

    return KubernetesLauncher(host=cluster.url, run_id=run_id, workdir=str(tmp_path / "pods/{pod}/work"),
                              home=str(tmp_path / "pods/{pod}/home"), **kw)


def spec(rid, *, image=None, task_id="t", timeout_s=60.0):
    return SandboxSpec(rollout_id=rid, task=Task(id=task_id, instruction="x", image=image, timeout_s=timeout_s,
                                                 resources=Resources(cpu=1, memory_mb=512)),
                       proxy_url="http://127.0.0.1:9", api_key="sk-rollout")


async def test_pod_exec_files_logs_and_cleanup(cluster, tmp_path):
    cluster.core.create_namespaced_pod("default", pod(name="of-stale", namespace="default", run_id="k1"))
    la = make_launcher(cluster, tmp_path)
    sbx = await la.start(spec("r-exec"))
    assert "of-stale" not in cluster.pods(), "orphan of the same run not removed on start"
    from kubernetes import client

    [pol] = [p for p in cluster.api.sanitize_for_serialization(
        client.NetworkingV1Api(cluster.api).list_namespaced_network_policy("default").items)
        if p["metadata"]["name"] == "k1-egress"]
    assert pol["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "127.0.0.1/32"}}]
    assert pol["spec"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": 9},  # the proxy, and the services
                                                 {"protocol": "TCP", "port": 18100, "endPort": 18299}]
    manifest = cluster.api.sanitize_for_serialization(cluster.core.read_namespaced_pod(sbx.pod, "default"))
    assert same_quantities(manifest["spec"]["containers"][0]["resources"]["limits"],  # read back: compared by value
                           {"cpu": "1000m", "memory": "512Mi", "ephemeral-storage": "4Gi"})
    r = await sbx.exec(["sh", "-c", "echo hi; echo $OPENFORGE_API_KEY; echo err >&2; pwd"])
    assert r.returncode == 0 and r.stdout.split() == ["hi", "sk-rollout", str(sbx.workdir)] and r.stderr == "err\n"
    await sbx.write_file("a/b.txt", b"data", 0o600)
    assert await sbx.read_file(sbx.workdir / "a/b.txt") == b"data"
    local = await sbx.pull_workdir()
    assert (local / "a/b.txt").read_bytes() == b"data"
    assert "listening" in await sbx.logs()
    r = await sbx.exec(["sh", "-c", "sleep 30"], timeout_s=1)
    assert r.timed_out and r.returncode is None
    with pytest.raises(SandboxFileNotFound, match=r"no file nope\.txt"):  # the agent did not write it: distinct
        await sbx.read_file("nope.txt")
    with pytest.raises(SandboxFileRefused, match="a directory") as e:  # the agent's doing, and not "missing"
        await sbx.read_file(sbx.workdir / "a")
    assert not isinstance(e.value, SandboxFileNotFound)
    assert any(p.startswith("of-r-exec") for p in cluster.pods())
    await sbx.close()
    await la.aclose()
    assert not [p for p in cluster.pods() if p.startswith("of-r-exec")]
    assert not [s.metadata.name for s in cluster.core.list_namespaced_secret("default").items
                if (s.metadata.labels or {}).get("openforge.dev/run") == "k1"]


async def test_image_pull_backoff_is_env_error(cluster, tmp_path):
    la = make_launcher(cluster, tmp_path, run_id="k2", ready_timeout_s=20)
    with pytest.raises(SandboxError, match="ImagePullBackOff") as e:
        await la.start(spec("r-img", image="missing/agent:1"))
    assert e.value.status == S.ENV_ERROR
    await la.aclose()
    assert not [p for p in cluster.pods() if p.startswith("of-r-img")]


async def test_eviction_and_deadline_mid_exec(cluster, tmp_path):
    la = make_launcher(cluster, tmp_path, run_id="k3")
    for rid, fail, expected in (("r-evict", cluster.evict, S.INFRA_ERROR), ("r-dead", cluster.deadline, S.TIMEOUT)):
        sbx = await la.start(spec(rid))
        run = asyncio.create_task(sbx.exec(["sleep", "60"], timeout_s=60))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(fail, sbx.pod)
        r = await asyncio.wait_for(run, 30)
        assert r.returncode is None and sbx.lost_status == expected, (r, sbx.lost_reason)
        await sbx.close()
    await la.aclose()


async def test_rollouts_through_pods_with_retry_after_eviction(cluster, tmp_path):
    from openforge.envs.claw import ClawEnvironment, reference_solution
    from openforge.harnesses.react import ReactHarness
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer
    from openforge.runner.rollout import run_groups, run_rollout

    tok = smollm2_tokenizer()
    env = ClawEnvironment()
    turns = {"turns": [{"shell": c} for c in reference_solution("files-rename")] + [{"text": "done"}],
             "tasks": {"files-append-line": [{"shell": "sleep 3"}, {"text": "done"}]}}
    cluster.evict_after["files-append-line"] = 0.3
    la = make_launcher(cluster, tmp_path, run_id="k4")
    async with ProxyServer(ScriptedBackend(turns, tokenizer=tok)) as proxy:
        traj = await run_rollout(harness=ReactHarness(), environment=env, task=env.task("files-rename"), launcher=la,
                                 proxy=proxy)
        assert traj.status == S.SUCCESS and traj.reward == 1.0 and traj.metadata["launcher"] == "kubernetes", traj.error
        res = await run_groups([env.task("files-append-line")], 2, 2, harness=ReactHarness, environment=env,
                               launcher=la, proxy=proxy, max_retries=2, progress=False)
    await la.aclose()
    evicted = [t for t in res.discarded if t.status == S.INFRA_ERROR]
    assert len(evicted) == 1 and "Evicted" in evicted[0].error, [(t.status, t.error) for t in res.discarded]
    assert len(res) == 1 and len(res[0].trajectories) == 2
    assert not [p for p in cluster.pods() if "k4" in p]


async def test_forge_rollout_cli_with_kubernetes_launcher(cluster, tmp_path):
    from typer.testing import CliRunner

    from openforge.cli.main import app

    out = tmp_path / "out"
    r = await asyncio.to_thread(CliRunner().invoke, app, [
        "rollout", "--env", "claw", "--task", "json-extract", "--backend", "scripted:-", "--reference",
        "--launcher", "kubernetes", "--launcher-opt", f"host={cluster.url}", "--launcher-opt", "run_id=k5",
        "--launcher-opt", f"workdir={tmp_path}/pods/{{pod}}/work", "--launcher-opt", f"home={tmp_path}/pods/{{pod}}/home",
        "--out", str(out)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "success" in r.output and (out / "trajectory.json").exists()


@pytest.mark.k8s
async def test_real_cluster_pod_roundtrip(tmp_path):
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG not set: no real cluster")
    from kubernetes import client, config

    if not client.CoreV1Api(config.new_client_from_config()).list_node().items:
        pytest.skip("the cluster has no nodes (an API server alone, e.g. scripts/k8s-apiserver.sh): pods cannot run")
    from openforge.launchers.kubernetes import KubernetesLauncher

    la = KubernetesLauncher(namespace=os.environ.get("OPENFORGE_K8S_NAMESPACE", "default"), run_id="openforge-ci",
                            network_policy=False, ready_timeout_s=300)
    try:
        sbx = await la.start(spec("real-1"))
        r = await sbx.exec(["sh", "-c", "echo ok > f.txt && cat f.txt && id -u"])
        assert r.returncode == 0 and r.stdout.split() == ["ok", "1000"]
        assert (await sbx.pull_workdir() / "f.txt").read_text() == "ok\n"
        await sbx.close()
    finally:
        await la.aclose()


async def test_task_dir_services_reach_the_pod(cluster, tmp_path):
    """[[services]] on Kubernetes: published by the driver on a port of ``service_ports`` (which the
    NetworkPolicy allows), reached from the pod at ``${NAME}_URL``; reference 1.0, no-op 0."""
    from pathlib import Path

    from openforge.envs.taskdir import TaskDirEnvironment

    env = TaskDirEnvironment(Path(__file__).resolve().parents[2] / "examples" / "tasks", log_dir=tmp_path / "logs")
    la = make_launcher(cluster, tmp_path, run_id="k-svc", service_ports="18300-18309")
    try:
        for task in (env.task("mail-reply"), env.task("ticket-triage")):
            for script, want in ((env.reference_solution(task)[0], 1.0), (None, 0.0)):
                sbx = await la.start(SandboxSpec(rollout_id=f"r-{task.id}-{want:g}", task=task,
                                                 proxy_url="http://127.0.0.1:9", api_key="k"))
                try:
                    await env.setup(task, sbx)
                    url = next(iter(env.harness_env(task, sbx).values()))
                    assert url.startswith("http://127.0.0.1:1830"), url
                    if script is not None:
                        r = await sbx.exec(["bash", "-c", script], env=env.harness_env(task, sbx), timeout_s=60)
                        assert r.returncode == 0, r.stderr
                    res = await env.verify(task, sbx)
                    assert res.reward == want, (task.id, res)
                finally:
                    await env.teardown(task, sbx)
                    await sbx.close()
        assert not la._service_ports_used, "published ports are released with their pod"
    finally:
        await la.aclose()


async def test_claw_mock_services_reach_the_pod(cluster, tmp_path):
    from openforge.envs.claw import ClawEnvironment

    env = ClawEnvironment()
    task = next(t for t in env.tasks() if t.metadata["services"])
    la = make_launcher(cluster, tmp_path, run_id="k-claw", service_ports="18310-18319")
    sbx = await la.start(SandboxSpec(rollout_id="r-claw", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        await env.setup(task, sbx)
        for cmd in env.reference_solution(task):
            r = await sbx.exec(["sh", "-c", cmd], env=env.harness_env(task, sbx), timeout_s=60)
            assert r.returncode == 0, r.stderr
        assert (await env.verify(task, sbx)).reward == 1.0
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
        await la.aclose()


def test_service_ports_must_be_a_range(cluster, tmp_path):
    with pytest.raises(SandboxError, match="service_ports must be FIRST-LAST"):
        make_launcher(cluster, tmp_path, service_ports="lots")
    p = build_network_policy(name="np", namespace="ns", run_id="run", proxy_port=8765, proxy_cidr="10.0.0.5",
                             service_ports=(18100, 18199))
    assert p["spec"]["egress"][0]["ports"][1] == {"protocol": "TCP", "port": 18100, "endPort": 18199}
