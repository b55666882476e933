"""``mini-swe-agent``: the real mini-SWE-agent CLI (PyPI ``mini-swe-agent``, executable ``mini``)
against the proxy's Chat Completions API (through LiteLLM's ``openai/`` provider).

Declarative data (a spec later): package ``PYPI_PINS["mini-swe-agent"]``, executable ``mini`` in its
own venv; wire ``chat``; argv ``mini -y --exit-immediately -c mini.yaml -c <home>/.openforge-mini.yaml
-o <home>/.openforge-mini-traj.json -t TASK``; the generated config gives ``model.model_name =
openai/<model>`` with ``model_kwargs.api_base``/``api_key`` (the proxy), ``agent.mode = yolo``,
``agent.cost_limit = 0`` and ``environment.cwd`` = the workdir; env ``MSWEA_CONFIGURED`` (no setup
prompt), ``MSWEA_COST_TRACKING=ignore_errors``, ``LITELLM_LOCAL_MODEL_COST_MAP`` (no download of
LiteLLM's price list), ``MSWEA_GLOBAL_CONFIG_DIR`` below the private HOME.

The agent ends by running ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (a shell call); the lines
that command prints after the marker are its submission, the final answer read back from the
trajectory file it writes.
"""

from __future__ import annotations

import json
from typing import Any

from ..harness import RolloutContext
from .pypi_cli import PypiCliHarness, litellm_env, pypi_install_hint

__all__ = ["MiniSweAgentHarness", "mini_config"]

CONFIG_FILE = ".openforge-mini.yaml"
TRAJ_FILE = ".openforge-mini-traj.json"


def mini_config(*, base_url: str, api_key: str, model: str, workdir: str, step_limit: int = 0) -> str:
    """The override config (JSON is YAML) merged over mini's own ``mini.yaml``."""
    return json.dumps({
        "agent": {"mode": "yolo", "confirm_exit": False, "cost_limit": 0, "step_limit": step_limit},
        "model": {"model_name": f"openai/{model}", "cost_tracking": "ignore_errors",
                  "model_kwargs": {"api_base": base_url, "api_key": api_key, "drop_params": True}},
        "environment": {"cwd": workdir},
    }, indent=2)


class MiniSweAgentHarness(PypiCliHarness):
    name = "mini-swe-agent"
    wire_api = "chat"
    executable = "mini"
    install_hint = pypi_install_hint("mini-swe-agent")
    answer_file = TRAJ_FILE

    def __init__(self, *, step_limit: int = 0, **kw: Any):
        super().__init__(**kw)
        self.step_limit = step_limit

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {CONFIG_FILE: mini_config(base_url=ctx.openai_base_url, api_key=ctx.api_key, model=ctx.model,
                                         workdir=str(ctx.workdir), step_limit=self.step_limit)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
                "MSWEA_GLOBAL_CONFIG_DIR": str(ctx.home / ".config" / "mini-swe-agent"),
                **litellm_env(ctx)}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "-y", "--exit-immediately", "-c", "mini.yaml", "-c", str(ctx.home / CONFIG_FILE),
                "-o", str(ctx.home / TRAJ_FILE), *self.extra_args, "-t", ctx.instruction]

    def answer_from_file(self, raw: bytes, stdout_answer: str | None) -> str | None:
        """The submission in the trajectory file, else what stdout says."""
        return submission(raw) or stdout_answer


def submission(raw: bytes) -> str | None:
    """The ``info.submission`` of mini's trajectory file (None when absent or unreadable)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    sub = (data.get("info") or {}).get("submission") if isinstance(data, dict) else None
    return sub.strip() or None if isinstance(sub, str) else None
