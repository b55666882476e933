"""``continue``: the real Continue CLI (npm ``@continuedev/cli``, command ``cn``) against the proxy's
OpenAI Chat Completions API.

Owns: the generated ``config.yaml`` (one ``openai``-provider model at the proxy's ``…/v1`` with the
rollout's key, every role on the policy; ``$CONTINUE_GLOBAL_DIR`` below the private HOME, so no
login to the Continue hub is needed), the offline environment (telemetry and metrics off) and the
headless argv ``cn -p --auto --silent --config CONFIG TASK`` (``--auto`` allows every tool). The final
answer is what ``-p`` prints.

Declarative data (for a harness spec): package ``@continuedev/cli`` (``versions.NPM_PINS["continue"]``,
executable ``cn``), wire ``chat``, config file ``$HOME/.continue/config.yaml`` (named by ``--config``),
base URL / key / model in that file.
"""

from __future__ import annotations

import json

from ..harness import RolloutContext
from .cli import CliHarness
from .versions import NPM_PINS

__all__ = ["ContinueHarness", "continue_config"]

CONFIG_DIR = ".continue"
CONFIG_PATH = f"{CONFIG_DIR}/config.yaml"

OFFLINE_ENV = {"CONTINUE_CLI_ENABLE_TELEMETRY": "0", "CONTINUE_METRICS_ENABLED": "0", "NO_COLOR": "1"}


def continue_config(*, base_url: str, api_key: str, model: str, context_window: int = 128_000,
                    max_tokens: int = 4096) -> str:
    """A local ``config.yaml`` (JSON is valid YAML) with one model on the proxy."""
    cfg = {
        "name": "openforge",
        "version": "1.0.0",
        "schema": "v1",
        "models": [{
            "name": model, "provider": "openai", "model": model, "apiBase": base_url, "apiKey": api_key,
            "roles": ["chat", "edit", "apply", "summarize"],
            "capabilities": ["tool_use"],
            "defaultCompletionOptions": {"contextLength": context_window, "maxTokens": max_tokens},
        }],
    }
    return json.dumps(cfg, indent=2)


class ContinueHarness(CliHarness):
    name = "continue"
    wire_api = "chat"
    executable = "cn"
    install_hint = f"forge harness install continue  (npm install {NPM_PINS['continue'].spec})"

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {CONFIG_PATH: continue_config(base_url=ctx.openai_base_url, api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"CONTINUE_GLOBAL_DIR": str(ctx.home / CONFIG_DIR), **OFFLINE_ENV}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "-p", "--auto", "--silent", "--config", str(ctx.home / CONFIG_PATH), *self.extra_args,
                ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        return stdout.strip() or None
