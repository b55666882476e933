"""Every manifest variant the Kubernetes launcher can produce, validated against the official
OpenAPI-derived JSON schemas of every Kubernetes version ``kubernetes-validate`` bundles (1.25 →
newest), strict (no unknown fields). The emulator stores anything; a real server does not."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from testdeps import missing

from openforge.launchers.k8s_manifests import (
    PodLayout,
    PodResources,
    _k8s_name,
    build_network_policy,
    build_pod_manifest,
    build_secret,
)


def _kv() -> Any:
    if importlib.util.find_spec("kubernetes_validate") is None:
        missing("kubernetes-validate is not installed (pip install -e '.[dev]')")
    import kubernetes_validate

    return kubernetes_validate


def _versions() -> list[str]:
    if importlib.util.find_spec("kubernetes_validate") is None:
        return ["1.25.0"]  # the test then skips (or fails in CI) with the reason
    from kubernetes_validate.utils import all_versions

    return sorted(set(all_versions()), key=lambda v: tuple(int(x) for x in v.split(".")))


def _pod(**kw: Any) -> dict[str, Any]:
    base = dict(name=_k8s_name("of-Rollout_1/abc"), namespace="default", image="python:3.11-slim", rollout_id="r1",
                run_id="run", task_id="t", secret_name="of-r1", proxy_url="http://10.0.0.5:8765")
    return build_pod_manifest(**{**base, **kw})


def _policy(**kw: Any) -> dict[str, Any]:
    base = dict(name=_k8s_name("run-egress"), namespace="default", run_id="run", proxy_port=8765)
    return build_network_policy(**{**base, **kw})


VARIANTS: dict[str, dict[str, Any]] = {
    "pod-default": _pod(),
    "pod-resources-fractional": _pod(cpu=0.5, memory_mb=1536, deadline_s=60),
    "pod-resources-whole": _pod(cpu=4, memory_mb=8192),
    "pod-disk": _pod(disk_mb=300),
    "pod-env-service-account-selector-labels": _pod(
        env={"A": "1", "task.var": "x", "_UNDER": "y", "with-dash": "z"}, service_account="runner",
        node_selector={"kubernetes.io/arch": "amd64"}, extra_labels={"team": "rl", "example.com/tier": "ci"}),
    "pod-custom-paths": _pod(workdir="/home/agent/proj", home="/home/agent", run_as_user=65534, agent_port=9000),
    "pod-value-objects": _pod(resources=PodResources(cpu=0.25, memory_mb=300, deadline_s=30),
                              layout=PodLayout(workdir="/srv/w", home="/srv/h", run_as_user=4242, agent_port=9100)),
    "secret": build_secret(name="of-r1", namespace="default", run_id="run", api_key="sk-x", agent_token="t"),
    "policy-ipv4": _policy(proxy_cidr="10.0.0.5"),
    "policy-ipv4-prefix": _policy(proxy_cidr="10.0.0.0/24"),
    "policy-ipv6": _policy(proxy_cidr="fd00::5"),
    "policy-services-range": _policy(proxy_cidr="10.0.0.5", service_ports=(18100, 18299)),
    "policy-services-port-by-port": _policy(proxy_cidr="fd00::5", service_ports=(18100, 18109), port_ranges=False),
    "policy-pod-labels": _policy(proxy_pod_labels={"app": "openforge-proxy"}),
    "policy-pod-labels-namespace-dns": _policy(proxy_pod_labels={"app": "openforge-proxy"}, proxy_namespace="forge",
                                               allow_dns=True, service_ports=(18100, 18199)),
}


@pytest.mark.parametrize("version", _versions())
def test_every_manifest_variant_matches_the_official_schema(version):
    kv = _kv()
    failures = []
    for name, obj in VARIANTS.items():
        try:
            kv.validate(json.loads(json.dumps(obj)), version, strict=True)
        except kv.ValidationError as e:
            failures.append(f"{name}: {e.message} at {'/'.join(map(str, e.path))}")
    assert not failures, f"Kubernetes {version}:\n" + "\n".join(failures)


def test_the_schema_check_catches_a_broken_manifest():
    """The check itself: an unknown field and a wrong type are refused (strict schemas)."""
    kv = _kv()
    pod = _pod()
    pod["spec"]["containers"][0]["resource"] = pod["spec"]["containers"][0].pop("resources")  # a typo
    with pytest.raises(kv.ValidationError, match="resource"):
        kv.validate(pod, _versions()[-1], strict=True)
    policy = _policy(proxy_cidr="10.0.0.5", service_ports=(1, 2))
    policy["spec"]["egress"][0]["ports"][1]["endPort"] = "2"
    with pytest.raises(kv.ValidationError):
        kv.validate(policy, _versions()[0], strict=True)


def test_the_variants_cover_every_builder_option():
    """A new builder option must get a variant here (each is passed by keyword in this file)."""
    import inspect
    from pathlib import Path

    source = Path(__file__).read_text()
    for fn in (build_pod_manifest, build_network_policy, build_secret):
        for p, param in inspect.signature(fn).parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:  # the old flat keywords: each has its variant above
                continue
            assert f"{p}=" in source, f"{fn.__name__}({p}=...) has no variant in VARIANTS"
    from openforge.launchers.k8s_manifests import _POD_FLAT

    for p in _POD_FLAT:
        assert f"{p}=" in source, f"build_pod_manifest({p}=...) has no variant in VARIANTS"
