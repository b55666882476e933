"""Helpers shared by the harness tests (imported by name; kept out of conftest on purpose)."""

from __future__ import annotations

import os

import psutil

from openforge.core.task import Task
from openforge.launchers.base import SandboxSpec


def leftover_processes(rollout_id: str) -> list[int]:
    """PIDs of live processes started for ``rollout_id`` (tagged by OPENFORGE_ROLLOUT_ID)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and p.environ().get("OPENFORGE_ROLLOUT_ID") == rollout_id \
                    and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def spec(rollout_id: str, proxy_url: str = "http://127.0.0.1:9", proxy_uds: str | None = None,
         timeout_s: float = 60.0) -> SandboxSpec:
    return SandboxSpec(rollout_id=rollout_id, task=Task(id="t", instruction="x", timeout_s=timeout_s),
                       proxy_url=proxy_url, api_key="sk-test", proxy_uds=proxy_uds)
