"""The seven things a real kube-apiserver (v1.20.2) showed that the emulator used to hide (issue 25),
each played against the launcher: by the stricter emulator (``kcluster.StrictEmulator``) where it
can, by a fake API object where the case is about how the launcher reads an answer."""

from __future__ import annotations

import json

import pytest

from openforge.core.errors import ConfigError, SandboxError
from openforge.core.task import Resources, Task
from openforge.core.types import RolloutStatus as S
from openforge.launchers.base import SandboxFailure, SandboxSpec
from openforge.launchers.k8s_checks import host_cidr, ip_literal, parse_quantity, same_quantities
from openforge.launchers.k8s_manifests import build_network_policy, build_pod_manifest, egress_ports

pytest.importorskip("kubernetes")
pytest.importorskip("kmock")
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from openforge.launchers import k8s_api

from .kcluster import Cluster


@pytest.fixture(scope="module")
def cluster():
    with Cluster() as c:
        yield c


def launcher(cluster, tmp_path, run_id, **kw):
    from openforge.launchers.kubernetes import KubernetesLauncher

    kw.setdefault("workdir", str(tmp_path / "pods/{pod}/work"))
    kw.setdefault("home", str(tmp_path / "pods/{pod}/home"))
    return KubernetesLauncher(host=cluster.url, run_id=run_id, **kw)


def spec(rid, *, env=None, proxy_url="http://127.0.0.1:9", cpu=1.0, memory_mb=512):
    return SandboxSpec(rollout_id=rid, task=Task(id="t", instruction="x", timeout_s=60,
                                                 resources=Resources(cpu=cpu, memory_mb=memory_mb)),
                       proxy_url=proxy_url, api_key="k", env=env or {})


def policies(cluster, run_id):
    items = cluster.api.sanitize_for_serialization(
        client.NetworkingV1Api(cluster.api).list_namespaced_network_policy("default").items)
    return [p for p in items if p["metadata"]["labels"].get("openforge.dev/run") == run_id]


def secrets(cluster, run_id):
    return [s.metadata.name for s in cluster.core.list_namespaced_secret("default").items
            if (s.metadata.labels or {}).get("openforge.dev/run") == run_id]


def api_error(status, message):
    e = ApiException(status=status, reason="x")
    e.body = json.dumps({"kind": "Status", "code": status, "message": message})
    return e


# -- 1. quantities come back canonical --------------------------------------------------------------

def test_quantities_compare_by_value():
    assert parse_quantity("1000m") == parse_quantity("1") == 1
    assert parse_quantity("2048Mi") == parse_quantity("2Gi") == 2 ** 31
    assert same_quantities({"cpu": "1500m", "memory": "1024Mi"}, {"cpu": "1.5", "memory": "1Gi"})
    assert not same_quantities({"cpu": "2"}, {"cpu": "1"})
    sent = build_pod_manifest(name="p", namespace="ns", image="i", rollout_id="r", run_id="x", task_id="t",
                              secret_name="p", proxy_url="http://10.0.0.1:1", cpu=1.5, memory_mb=1536)
    stored = json.loads(json.dumps(sent))
    stored["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1500m", "memory": "1536Mi",
                                                              "ephemeral-storage": "4096Mi"}
    k8s_api.check_resources("p", sent, stored)  # the same values, spelled differently: fine


async def test_a_cluster_that_changes_limits_is_refused_clearly(cluster, tmp_path):
    """A webhook / LimitRange that rewrites the pod's limits: the rollout would not get the task's
    resources; the launcher reads the created pod back and says so (env_error, not retried)."""
    cluster.handler.rewrite_limits = {"memory": "256Mi"}
    la = launcher(cluster, tmp_path, "f-limits")
    try:
        with pytest.raises(SandboxFailure, match="changed the limits") as e:
            await la.start(spec("r-limits"))
        assert e.value.status == S.ENV_ERROR
    finally:
        cluster.handler.rewrite_limits = None
        await la.aclose()


# -- 2. NetworkPolicy endPort dropped by older servers --------------------------------------------

async def test_dropped_end_port_falls_back_to_one_port_per_entry(cluster, tmp_path):
    cluster.handler.drop_end_port = True
    la = launcher(cluster, tmp_path, "f-endport", service_ports="18400-18405")
    try:
        sbx = await la.start(spec("r-endport"))
        [pol] = policies(cluster, "f-endport")
        assert egress_ports(pol) == {9, *range(18400, 18406)}, pol["spec"]["egress"]
        assert not any("endPort" in p for p in pol["spec"]["egress"][0]["ports"])
        await sbx.close()
    finally:
        cluster.handler.drop_end_port = False
        await la.aclose()


class _LossyNet:
    """A NetworkingV1Api whose server keeps only the first port of every rule."""

    def __init__(self):
        self.stored = None

    def create_namespaced_network_policy(self, namespace, body):
        spec = body["spec"]
        self.stored = {**body, "spec": {**spec, "egress": [{**r, "ports": r["ports"][:1]} for r in spec["egress"]]}}
        return self.stored

    def delete_namespaced_network_policy(self, name, namespace):
        self.stored = None


def test_a_policy_that_still_lacks_ports_is_refused():
    body = build_network_policy(name="np", namespace="ns", run_id="r", proxy_port=8765, proxy_cidr="10.0.0.5",
                                service_ports=(18100, 18102))
    fallback = build_network_policy(name="np", namespace="ns", run_id="r", proxy_port=8765, proxy_cidr="10.0.0.5",
                                    service_ports=(18100, 18102), port_ranges=False)
    with pytest.raises(SandboxFailure, match="without egress port") as e:
        k8s_api.apply_network_policy(_LossyNet(), "ns", body, lambda: fallback, lambda x: x)
    assert e.value.status == S.ENV_ERROR


# -- 3. pods refused (403) until the ServiceAccount exists ----------------------------------------

async def test_missing_service_account_is_a_clear_non_retried_error(cluster, tmp_path):
    la = launcher(cluster, tmp_path, "f-sa", namespace="no-sa", service_account_wait_s=0.5)
    try:
        with pytest.raises(SandboxFailure, match=r"no ServiceAccount 'default'.*create serviceaccount") as e:
            await la.start(spec("r-sa"))
        assert e.value.status == S.ENV_ERROR  # not infra_error: retrying cannot help
    finally:
        await la.aclose()


async def test_a_service_account_that_appears_meanwhile_is_waited_for(cluster, tmp_path):
    """A new namespace gets its ServiceAccount a moment later (the controller manager): the launcher
    waits (bounded) instead of failing the first rollouts. Here the pod is then created and, with no
    kubelet in that namespace, never ready: an ordinary ``infra_error``, not the ServiceAccount one."""
    import asyncio

    async def create_sa_later():
        await asyncio.sleep(0.5)
        await asyncio.to_thread(cluster.core.create_namespaced_service_account, "late-sa", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "late-sa"}})

    la = launcher(cluster, tmp_path, "f-late-sa", namespace="late-sa", service_account_wait_s=10, ready_timeout_s=1)
    later = asyncio.create_task(create_sa_later())
    try:
        with pytest.raises(SandboxFailure, match="not ready within") as e:
            await la.start(spec("r-late-sa"))
        assert e.value.status == S.INFRA_ERROR
    finally:
        await later
        await la.aclose()


def test_pod_create_403_for_service_account_is_named():
    e = api_error(403, 'pods "of-x" is forbidden: error looking up service account ns/runner: serviceaccount '
                       '"runner" not found')
    f = k8s_api.create_refused(e, "pod of-x", "ns", "runner")
    assert f.status == S.ENV_ERROR and "no ServiceAccount 'runner'" in str(f)
    quota = k8s_api.create_refused(api_error(403, "exceeded quota: q, requested: cpu=2"), "pod p", "ns", None)
    assert quota.status == S.INFRA_ERROR  # frees up as other pods end
    assert k8s_api.create_refused(api_error(500, "etcd timeout"), "pod p", "ns", None).status == S.INFRA_ERROR


# -- 4. the run's NetworkPolicy and Secrets are garbage-collected by label --------------------------

async def test_aclose_and_remove_orphans_delete_policy_and_secrets(cluster, tmp_path):
    la = launcher(cluster, tmp_path, "f-gc")
    sbx = await la.start(spec("r-gc"))
    assert policies(cluster, "f-gc") and secrets(cluster, "f-gc")
    await la.aclose()
    assert not policies(cluster, "f-gc") and not secrets(cluster, "f-gc")
    del sbx
    # a driver that died: its successor (same run id) removes what was left, before starting
    body = build_network_policy(name="f-gc-egress", namespace="default", run_id="f-gc", proxy_port=1,
                                proxy_cidr="10.9.9.9")
    client.NetworkingV1Api(cluster.api).create_namespaced_network_policy("default", body)
    assert k8s_api.delete_labelled(cluster.core, client.NetworkingV1Api(cluster.api), "default",
                                   "app.kubernetes.io/managed-by=openforge,openforge.dev/run=f-gc",
                                   lambda o: True, cluster.api.sanitize_for_serialization) == ["f-gc-egress"]
    client.NetworkingV1Api(cluster.api).create_namespaced_network_policy("default", body)
    la2 = launcher(cluster, tmp_path, "f-gc", network_policy="false")
    assert "f-gc-egress" not in la2.remove_orphans()  # without a policy of its own it leaves policies alone
    la3 = launcher(cluster, tmp_path, "f-gc")
    assert la3.remove_orphans() == ["f-gc-egress"] and not policies(cluster, "f-gc")


# -- 5. an IPv6 proxy is a /128 -------------------------------------------------------------------

async def test_ipv6_proxy_is_a_single_address(cluster, tmp_path):
    assert host_cidr("fd00::5", "proxy_cidr") == "fd00::5/128" and host_cidr("10.0.0.5", "x") == "10.0.0.5/32"
    p = build_network_policy(name="np", namespace="ns", run_id="r", proxy_port=1, proxy_cidr="fd00::5")
    assert p["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "fd00::5/128"}}]
    la = launcher(cluster, tmp_path, "f-v6")
    try:
        sbx = await la.start(spec("r-v6", proxy_url="http://[::1]:9"))
        [pol] = policies(cluster, "f-v6")
        assert pol["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "::1/128"}}]
        await sbx.close()
    finally:
        await la.aclose()


# -- 6. 127.1-style addresses are refused by openforge ----------------------------------------------

@pytest.mark.parametrize("host", ["127.1", "10.1.2", "0x7f.0.0.1", "127.0.0.01", "300.1.1.1"])
def test_shorthand_ipv4_is_refused(host):
    with pytest.raises(ConfigError, match="write all four decimal parts"):
        ip_literal(host, "proxy host")
    with pytest.raises(ConfigError, match="write all four"):
        host_cidr(host, "proxy_cidr")
    assert ip_literal("proxy.ns.svc", "proxy host") is None and str(ip_literal("127.0.0.1", "x")) == "127.0.0.1"


async def test_shorthand_proxy_host_is_refused_before_sending(cluster, tmp_path):
    with pytest.raises(ConfigError, match=r"'127.1'"):
        launcher(cluster, tmp_path, "f-short", proxy_url="http://127.1:8765")
    with pytest.raises(ConfigError, match=r"proxy_cidr '127.1'"):
        launcher(cluster, tmp_path, "f-short", proxy_cidr="127.1")
    la = launcher(cluster, tmp_path, "f-short")  # the proxy URL of the rollout itself
    try:
        with pytest.raises(SandboxFailure, match=r"'127.1'") as e:
            await la.start(spec("r-short", proxy_url="http://127.1:9"))
        assert e.value.status == S.ENV_ERROR and not policies(cluster, "f-short")
    finally:
        await la.aclose()


# -- 7. what the server answers 422 for is refused before sending; a 422 is not retried -------------

def test_invalid_options_are_config_errors(cluster, tmp_path):
    with pytest.raises(ConfigError, match="home and workdir are both '/w'"):
        launcher(cluster, tmp_path, "f-422", workdir="/w", home="/w/")
    with pytest.raises(ConfigError, match=r"/tmp"):
        launcher(cluster, tmp_path, "f-422", workdir="/tmp", home="/h")
    with pytest.raises(ConfigError, match=r"app='proxy/x'.*no '/'"):
        launcher(cluster, tmp_path, "f-422", proxy_pod_labels="app=proxy/x")
    with pytest.raises(ConfigError, match="namespace 'My_NS'"):
        launcher(cluster, tmp_path, "f-422", namespace="My_NS")
    with pytest.raises(ConfigError, match="label team='a/b'"):
        build_pod_manifest(name="p", namespace="ns", image="i", rollout_id="r", run_id="x", task_id="t",
                           secret_name="p", proxy_url="http://10.0.0.1:1", extra_labels={"team": "a/b"})


async def test_bad_env_name_is_refused_before_sending(cluster, tmp_path):
    la = launcher(cluster, tmp_path, "f-env")
    try:
        with pytest.raises(SandboxFailure, match=r"'1BAD'.*refused by Kubernetes") as e:
            await la.start(spec("r-env", env={"1BAD": "x", "GOOD": "y"}))
        assert e.value.status == S.ENV_ERROR
        assert not [p for p in cluster.pods() if p.startswith("of-r-env")] and not secrets(cluster, "f-env")
    finally:
        await la.aclose()


async def test_a_422_that_comes_back_is_not_retried(cluster, tmp_path, monkeypatch):
    """A rule openforge does not check (here: its env check switched off) still ends as a
    configuration error, not as a retried infra_error."""
    from openforge.launchers import k8s_manifests

    monkeypatch.setattr(k8s_manifests, "check_env_names", lambda names, what: None)
    la = launcher(cluster, tmp_path, "f-422b")
    try:
        with pytest.raises(SandboxFailure, match=r"refused pod of-r-422 as invalid \(422") as e:
            await la.start(spec("r-422", env={"BAD NAME": "x"}))
        assert e.value.status == S.ENV_ERROR
        assert not secrets(cluster, "f-422b")
    finally:
        await la.aclose()


def test_refusals_read_the_servers_message():
    assert k8s_api.refusal(api_error(422, "Pod \"p\" is invalid: x")) == (422, 'Pod "p" is invalid: x')
    assert k8s_api.refusal(ValueError("x")) is None
    assert isinstance(k8s_api.create_refused(api_error(422, "bad"), "pod p", "ns", None), SandboxError)
