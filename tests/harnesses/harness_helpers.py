"""Helpers shared by the harness tests (imported by name; kept out of conftest on purpose)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import psutil

from openforge.core.task import Task
from openforge.harness import RolloutContext
from openforge.launchers.base import SandboxSpec

#: the proxy URLs of :func:`config_ctx`'s rollout ``r1``: OpenAI (…/v1) and Anthropic / Gemini (the root)
OA = "http://127.0.0.1:18000/r/r1/v1"
AN = "http://127.0.0.1:18000/r/r1"


def config_ctx(root: Path, instruction: str = "write hi to out.txt") -> RolloutContext:
    """A rollout context for rendering a harness's config, env and argv (nothing runs): rollout
    ``r1``, key ``sk-roll``, model ``pol``, HOME and workdir below ``root`` (not created)."""
    sbx = SimpleNamespace(workdir=root / "work", home=root / "home", proxy_url="http://127.0.0.1:18000")
    return RolloutContext(rollout_id="r1", task=Task(id="t", instruction=instruction), sandbox=sbx,  # type: ignore[arg-type]
                          api_key="sk-roll", openai_base_url=OA, anthropic_base_url=AN, model="pol", budget_s=90)


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
