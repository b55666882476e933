"""``build_pod_manifest`` takes its resources and layout as value objects (``PodResources`` /
``PodLayout``); the old flat keywords still build the same pod; a misspelt one is a TypeError."""

from __future__ import annotations

import pytest

from openforge.launchers.k8s_manifests import PodLayout, PodResources, build_pod_manifest

BASE = dict(name="of-r1", namespace="ns", image="python:3.11-slim", rollout_id="r1", run_id="run",
            task_id="t", secret_name="of-r1", proxy_url="http://10.0.0.1:8765")


def test_objects_and_flat_keywords_build_the_same_pod():
    by_objects = build_pod_manifest(**BASE, resources=PodResources(cpu=1.0, memory_mb=512, deadline_s=60),
                                    layout=PodLayout(workdir="/w", home="/h", run_as_user=2000, agent_port=9000))
    by_flat = build_pod_manifest(**BASE, cpu=1.0, memory_mb=512, deadline_s=60, workdir="/w", home="/h",
                                 run_as_user=2000, agent_port=9000)
    assert by_objects == by_flat
    spec = by_objects["spec"]
    assert spec["activeDeadlineSeconds"] == 60 and spec["securityContext"]["runAsUser"] == 2000
    (c,) = spec["containers"]
    assert c["workingDir"] == "/w" and c["ports"][0]["containerPort"] == 9000
    assert c["resources"]["limits"] == {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "4Gi"}
    assert build_pod_manifest(**BASE) == build_pod_manifest(**BASE, resources=PodResources(), layout=PodLayout())


def test_a_flat_keyword_overrides_its_object_and_a_misspelt_one_is_refused():
    m = build_pod_manifest(**BASE, resources=PodResources(cpu=4.0, deadline_s=60), deadline_s=90)
    assert m["spec"]["activeDeadlineSeconds"] == 90
    assert m["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "4"
    with pytest.raises(TypeError, match="memory"):
        build_pod_manifest(**BASE, memory=512)
