"""The Kubernetes launcher against a real ``kube-apiserver`` (``k8s`` marker).

Start one with ``scripts/k8s-apiserver.sh start`` (loopback only, v1.20.2 from Debian's sources, no
kubelet); the suite reads that script's kubeconfig (or ``OPENFORGE_K8S_KUBECONFIG``) and skips, saying
so, when no server answers. It only talks to a server on a loopback address unless
``OPENFORGE_K8S_ANY_SERVER=1``: it creates and deletes namespaces and objects.

Pods never run (there is no kubelet): the tests check what the API server does with what the
launcher sends: objects created, refused, watched, read back and deleted. Pod state changes a
kubelet would make are written to the pods' status subresource by the test, as a kubelet would.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from openforge.core.errors import ConfigError
from openforge.core.task import Resources, Task
from openforge.core.types import RolloutStatus as S
from openforge.launchers import k8s_manifests
from openforge.launchers.base import SandboxFailure, SandboxSpec
from openforge.launchers.k8s_api import create_refused
from openforge.launchers.k8s_checks import same_quantities
from openforge.launchers.k8s_manifests import (
    build_network_policy,
    build_pod_manifest,
    build_secret,
    egress_ports,
)

pytestmark = pytest.mark.k8s
pytest.importorskip("kubernetes")

KUBECONFIG = os.environ.get("OPENFORGE_K8S_KUBECONFIG") or str(
    Path(os.environ.get("OPENFORGE_K8S_DIR", Path.home() / ".cache/openforge/k8s-apiserver")) / "kubeconfig")
PROXY = "http://127.0.0.1:8765"  # never contacted: no pod runs


@pytest.fixture(scope="module")
def kube() -> Any:
    from kubernetes import client, config

    if not Path(KUBECONFIG).exists():
        pytest.skip(f"no Kubernetes API server: {KUBECONFIG} is missing (start one: scripts/k8s-apiserver.sh start)")
    api = config.new_client_from_config(config_file=KUBECONFIG)
    host = urlparse(api.configuration.host).hostname
    if host not in ("127.0.0.1", "localhost", "::1") and os.environ.get("OPENFORGE_K8S_ANY_SERVER") != "1":
        pytest.skip(f"{KUBECONFIG} points at {host}, not a loopback server (set OPENFORGE_K8S_ANY_SERVER=1 to allow)")
    try:
        version = client.VersionApi(api).get_code(_request_timeout=5)
    except Exception as e:
        pytest.skip(f"no Kubernetes API server reachable at {api.configuration.host} ({type(e).__name__}): "
                    "start one with scripts/k8s-apiserver.sh start")
    api.server_version = version.git_version
    yield api
    api.close()


def _ns(kube: Any, with_service_account: bool) -> str:
    from kubernetes import client

    name = f"of-k8s-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    if with_service_account:  # what a controller manager would do
        core.create_namespaced_service_account(name, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                      "metadata": {"name": "default"}})
    return name


@pytest.fixture(scope="module")
def ns(kube: Any) -> Any:
    from kubernetes import client

    name = _ns(kube, with_service_account=True)
    yield name
    client.CoreV1Api(kube).delete_namespace(name)  # stays Terminating without a controller manager: harmless


def launcher(ns: str, run_id: str, **kw: Any) -> Any:
    from openforge.launchers.kubernetes import KubernetesLauncher

    kw.setdefault("ready_timeout_s", 30)
    return KubernetesLauncher(kubeconfig=KUBECONFIG, namespace=ns, run_id=run_id, proxy_url=PROXY, **kw)


def spec(rid: str, **kw: Any) -> SandboxSpec:
    return SandboxSpec(rollout_id=rid, task=Task(id="t", instruction="x", timeout_s=60,
                                                 resources=Resources(cpu=kw.pop("cpu", 1.5),
                                                                     memory_mb=kw.pop("memory_mb", 1536))),
                       proxy_url=PROXY, api_key="k", **kw)


def labelled(kube: Any, ns: str, run_id: str) -> dict[str, list[str]]:
    from kubernetes import client

    sel = f"openforge.dev/run={run_id}"
    core, net = client.CoreV1Api(kube), client.NetworkingV1Api(kube)
    return {kind: [o.metadata.name for o in lister(ns, label_selector=sel).items]
            for kind, lister in (("pods", core.list_namespaced_pod), ("secrets", core.list_namespaced_secret),
                                 ("networkpolicies", net.list_namespaced_network_policy))}


async def wait_for(pred: Any, timeout: float = 20.0) -> Any:
    end = asyncio.get_running_loop().time() + timeout
    while (value := await asyncio.to_thread(pred)) in (None, False, [], {}):
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.2)
    return value


def _pod_of(kube: Any, ns: str, prefix: str) -> Any:
    from kubernetes import client

    pods = [p for p in client.CoreV1Api(kube).list_namespaced_pod(ns).items if p.metadata.name.startswith(prefix)]
    return kube.sanitize_for_serialization(pods[0]) if pods else None


# -- refused with a clear error ------------------------------------------------------------------

async def test_pods_refused_without_service_account(kube):
    from kubernetes import client

    bare = _ns(kube, with_service_account=False)
    try:
        la = launcher(bare, "k8s-sa", service_account_wait_s=1)
        with pytest.raises(SandboxFailure, match="no ServiceAccount 'default'") as e:
            await la.start(spec("sa-1"))
        assert e.value.status == S.ENV_ERROR
        await la.aclose()
        manifest = build_pod_manifest(name="raw", namespace=bare, image="i", rollout_id="r", run_id="k8s-sa",
                                      task_id="t", secret_name="raw", proxy_url=PROXY)
        with pytest.raises(Exception) as raw:  # what the real server says, mapped by the launcher
            client.CoreV1Api(kube).create_namespaced_pod(bare, manifest)
        assert raw.value.status == 403
        mapped = create_refused(raw.value, "pod raw", bare, None)
        assert mapped.status == S.ENV_ERROR and "no ServiceAccount 'default'" in str(mapped)
    finally:
        client.CoreV1Api(kube).delete_namespace(bare)


@pytest.mark.parametrize("case", ["env", "mounts", "label", "cidr"])
async def test_what_the_server_refuses_is_refused_before_sending(kube, ns, monkeypatch, case):
    """Each input is refused by openforge's own check (ConfigError), and — with that check switched
    off — by the real server with 422, which the launcher reports as a non-retried error."""
    from kubernetes import client

    kw: dict[str, Any] = dict(name=f"bad-{case}", namespace=ns, image="i", rollout_id="r", run_id="k8s-422",
                              task_id="t", secret_name="x", proxy_url=PROXY)
    if case == "env":
        kw["env"] = {"BAD NAME": "1"}
    elif case == "mounts":
        kw.update(workdir="/home/agent", home="/home/agent")
    elif case == "label":
        kw["extra_labels"] = {"team": "a/b"}
    if case == "cidr":
        build, create = build_network_policy, client.NetworkingV1Api(kube).create_namespaced_network_policy
        kw = dict(name="bad-cidr", namespace=ns, run_id="k8s-422", proxy_port=1, proxy_cidr="127.1")
    else:
        build, create = build_pod_manifest, client.CoreV1Api(kube).create_namespaced_pod
    with pytest.raises(ConfigError):
        build(**kw)
    # openforge's checks off: the manifest as it would go out without them
    monkeypatch.setattr(k8s_manifests, "check_env_names", lambda names, what: None)
    monkeypatch.setattr(k8s_manifests, "check_mount_paths", lambda paths: None)
    monkeypatch.setattr(k8s_manifests, "check_labels", lambda labels, what: dict(labels))
    monkeypatch.setattr(k8s_manifests, "host_cidr", lambda value, what: f"{value}/32")
    body = build(**kw)
    with pytest.raises(Exception) as raw:
        create(ns, body)
    assert raw.value.status == 422, raw.value
    mapped = create_refused(raw.value, f"{case} object", ns, None)
    assert mapped.status == S.ENV_ERROR and "as invalid (422" in str(mapped)


# -- created, read back, watched, deleted ----------------------------------------------------------

async def test_created_objects_read_back_and_are_watched(kube, ns):
    from kubernetes import client

    la = launcher(ns, "k8s-rt", service_ports="18100-18109")
    start = asyncio.create_task(la.start(spec("rt-1", cpu=1.5, memory_mb=1536)))
    try:
        pod = await wait_for(lambda: _pod_of(kube, ns, "of-rt-1"))
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert same_quantities(limits, {"cpu": "1500m", "memory": "1536Mi", "ephemeral-storage": "4Gi"}), limits
        [pol] = [kube.sanitize_for_serialization(p) for p in
                 client.NetworkingV1Api(kube).list_namespaced_network_policy(ns).items
                 if p.metadata.labels.get("openforge.dev/run") == "k8s-rt"]
        assert egress_ports(pol) == {8765, *range(18100, 18110)}, pol["spec"]["egress"]  # never one port of the range
        assert pol["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "127.0.0.1/32"}}]
        name = pod["metadata"]["name"]
        await wait_for(lambda: name in la._pods)  # the launcher's watch saw it
        assert la._pods[name]["status"].get("phase", "Pending") == "Pending"
        client.CoreV1Api(kube).patch_namespaced_pod_status(name, ns, {"status": {  # as a kubelet would
            "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}})
        with pytest.raises(SandboxFailure, match="Evicted") as e:
            await asyncio.wait_for(start, 30)
        assert e.value.status == S.INFRA_ERROR
    finally:
        start.cancel()
        await la.aclose()
    assert labelled(kube, ns, "k8s-rt") == {"pods": [], "secrets": [], "networkpolicies": []}


async def test_image_pull_backoff_through_the_watch(kube, ns):
    from kubernetes import client

    la = launcher(ns, "k8s-img", network_policy="false")
    start = asyncio.create_task(la.start(spec("img-1")))
    try:
        pod = await wait_for(lambda: _pod_of(kube, ns, "of-img-1"))
        client.CoreV1Api(kube).patch_namespaced_pod_status(pod["metadata"]["name"], ns, {"status": {
            "phase": "Pending", "containerStatuses": [{
                "name": "rollout", "image": "missing/x", "imageID": "", "ready": False, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}})
        with pytest.raises(SandboxFailure, match="ImagePullBackOff") as e:
            await asyncio.wait_for(start, 30)
        assert e.value.status == S.ENV_ERROR
    finally:
        start.cancel()
        await la.aclose()
    assert labelled(kube, ns, "k8s-img")["pods"] == []


async def test_quantities_come_back_canonical(kube, ns):
    """What the emulator used to hide: the server rewrites quantities, so only a by-value
    comparison holds."""
    from kubernetes import client

    body = build_pod_manifest(name="canon", namespace=ns, image="i", rollout_id="r", run_id="k8s-canon", task_id="t",
                              secret_name="canon", proxy_url=PROXY)
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1000m", "memory": "2048Mi"},
                                                  "requests": {"cpu": "1000m", "memory": "2048Mi"}}
    core = client.CoreV1Api(kube)
    stored = kube.sanitize_for_serialization(core.create_namespaced_pod(ns, body))
    try:
        limits = stored["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"cpu": "1", "memory": "2Gi"}
        assert same_quantities(limits, {"cpu": "1000m", "memory": "2048Mi"})
    finally:
        core.delete_namespaced_pod("canon", ns, grace_period_seconds=0)


async def test_orphans_of_a_dead_driver_are_collected_by_label(kube, ns):
    """Objects a SIGKILLed driver left (pod, Secret, NetworkPolicy): its successor removes them."""
    from kubernetes import client

    core, net = client.CoreV1Api(kube), client.NetworkingV1Api(kube)
    core.create_namespaced_secret(ns, build_secret(name="of-dead", namespace=ns, run_id="k8s-dead", api_key="k",
                                                   agent_token="t"))
    core.create_namespaced_pod(ns, build_pod_manifest(name="of-dead", namespace=ns, image="i", rollout_id="dead",
                                                      run_id="k8s-dead", task_id="t", secret_name="of-dead",
                                                      proxy_url=PROXY))
    net.create_namespaced_network_policy(ns, build_network_policy(name="k8s-dead-egress", namespace=ns,
                                                                  run_id="k8s-dead", proxy_port=8765,
                                                                  proxy_cidr="127.0.0.1"))
    other = build_secret(name="not-ours", namespace=ns, run_id="k8s-other", api_key="k", agent_token="t")
    core.create_namespaced_secret(ns, other)
    la = launcher(ns, "k8s-dead")
    assert sorted(la.remove_orphans()) == ["k8s-dead-egress", "of-dead", "of-dead"]
    assert labelled(kube, ns, "k8s-dead") == {"pods": [], "secrets": [], "networkpolicies": []}
    assert labelled(kube, ns, "k8s-other")["secrets"] == ["not-ours"]
    core.delete_namespaced_secret("not-ours", ns)
    await la.aclose()


async def test_ipv6_proxy_is_stored_as_a_single_address(kube, ns):
    from kubernetes import client

    net = client.NetworkingV1Api(kube)
    body = build_network_policy(name="v6", namespace=ns, run_id="k8s-v6", proxy_port=8765, proxy_cidr="::1")
    stored = kube.sanitize_for_serialization(net.create_namespaced_network_policy(ns, body))
    try:
        assert stored["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "::1/128"}}]
    finally:
        net.delete_namespaced_network_policy("v6", ns)
