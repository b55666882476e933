"""``pi``: the real pi coding agent (``@earendil-works/pi-coding-agent``) against the proxy, over a
selectable wire API (Chat Completions, Responses or Anthropic Messages).

Owns: the generated ``models.json`` (one ``openforge`` provider; ``$PI_CODING_AGENT_DIR`` below the
private HOME), the offline switches (``PI_OFFLINE``, no version check, no telemetry) and the argv
``pi -p --provider openforge --model M --no-session``. pi has no permission prompts to approve.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ConfigError
from ..harness import RolloutContext
from .cli import CliHarness
from .versions import NPM_PINS

__all__ = ["PI_APIS", "PiHarness", "pi_models_json"]

#: openforge wire API → pi's ``api`` value.
PI_APIS = {"chat": "openai-completions", "responses": "openai-responses", "messages": "anthropic-messages"}


def pi_models_json(*, wire_api: str, openai_base_url: str, anthropic_base_url: str, api_key: str,
                   model: str, context_window: int = 128_000, max_tokens: int = 4096) -> str:
    if wire_api not in PI_APIS:
        raise ConfigError(f"pi: wire_api must be one of {', '.join(PI_APIS)}, not {wire_api!r}")
    provider: dict[str, Any] = {
        "name": "openforge",
        "baseUrl": anthropic_base_url if wire_api == "messages" else openai_base_url,
        "api": PI_APIS[wire_api],
        "apiKey": api_key,
        "models": [{"id": model, "name": model, "reasoning": False, "input": ["text"],
                    "contextWindow": context_window, "maxTokens": max_tokens,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
    }
    if wire_api == "chat":
        provider["compat"] = {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
    return json.dumps({"providers": {"openforge": provider}}, indent=2)


class PiHarness(CliHarness):
    name = "pi"
    wire_api = "chat"
    wire_apis = ("chat", "responses", "messages")
    executable = "pi"
    install_hint = f"forge harness install pi  (npm install {NPM_PINS['pi'].spec}; Node >= 22.19)"

    def __init__(self, *, wire_api: str = "chat", **kw: Any):
        super().__init__(**kw)
        if wire_api not in PI_APIS:
            raise ConfigError(f"pi: wire_api must be one of {', '.join(PI_APIS)}, not {wire_api!r}")
        self.wire_api = wire_api  # type: ignore[misc]

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {".pi/agent/models.json": pi_models_json(
            wire_api=self.wire_api, openai_base_url=ctx.openai_base_url,
            anthropic_base_url=ctx.anthropic_base_url, api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"PI_CODING_AGENT_DIR": str(ctx.home / ".pi" / "agent"), "PI_OFFLINE": "1",
                "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0", "NO_COLOR": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "-p", "--provider", "openforge", "--model", ctx.model, "--no-session", "--offline",
                *self.extra_args, ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        return stdout.strip() or None
