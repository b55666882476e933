"""``openclaw``: the real OpenClaw CLI (``openclaw``, Node >= 24.16) against the proxy, over a
selectable wire API.

Owns: the generated JSON config (``models.mode = "replace"``, one ``openforge`` provider, the policy
as the default agent model, diagnostics off) and the headless argv ``openclaw agent exec --config
CFG --model openforge/M --json --cwd WORKDIR``. ``agent exec`` runs with a temporary state dir and
the full exec policy, so no approval flag is needed; it contacted no other host in our checks.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ConfigError
from ..core.types import RolloutStatus
from ..harness import HarnessResult, RolloutContext
from .cli import CliHarness
from .versions import NPM_PINS

__all__ = ["OPENCLAW_APIS", "OpenClawHarness", "openclaw_config"]

OPENCLAW_APIS = {"chat": "openai-completions", "responses": "openai-responses", "messages": "anthropic-messages"}
CONFIG_PATH = ".openclaw/openforge.json"


def openclaw_config(*, wire_api: str, openai_base_url: str, anthropic_base_url: str, api_key: str,
                    model: str, context_window: int = 128_000, max_tokens: int = 4096) -> str:
    if wire_api not in OPENCLAW_APIS:
        raise ConfigError(f"openclaw: wire_api must be one of {', '.join(OPENCLAW_APIS)}, not {wire_api!r}")
    provider = {
        "baseUrl": anthropic_base_url if wire_api == "messages" else openai_base_url,
        "apiKey": api_key,
        "api": OPENCLAW_APIS[wire_api],
        "models": [{"id": model, "name": model, "reasoning": False, "input": ["text"],
                    "contextWindow": context_window, "maxTokens": max_tokens,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
    }
    cfg = {
        "models": {"mode": "replace", "providers": {"openforge": provider}},
        "agents": {"defaults": {"model": {"primary": f"openforge/{model}"}}},
        "diagnostics": {"enabled": False},
    }
    return json.dumps(cfg, indent=2)


class OpenClawHarness(CliHarness):
    name = "openclaw"
    wire_api = "chat"
    wire_apis = ("chat", "responses", "messages")
    executable = "openclaw"
    install_hint = f"forge harness install openclaw  (Node >= 24.16 + npm install {NPM_PINS['openclaw'].spec})"

    def __init__(self, *, wire_api: str = "chat", **kw: Any):
        super().__init__(**kw)
        if wire_api not in OPENCLAW_APIS:
            raise ConfigError(f"openclaw: wire_api must be one of {', '.join(OPENCLAW_APIS)}, not {wire_api!r}")
        self.wire_api = wire_api  # type: ignore[misc]

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {CONFIG_PATH: openclaw_config(
            wire_api=self.wire_api, openai_base_url=ctx.openai_base_url,
            anthropic_base_url=ctx.anthropic_base_url, api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"CLAWHUB_DISABLE_TELEMETRY": "1", "OPENCLAW_NO_AUTO_UPDATE": "1", "NO_COLOR": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "agent", "exec", "--config", str(ctx.home / CONFIG_PATH), "--model",
                f"openforge/{ctx.model}", "--json", "--cwd", str(ctx.workdir),
                "--timeout", str(max(1, int(ctx.remaining_s()))), *self.extra_args, ctx.instruction]

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        out = await super().run(ctx)
        if out.exit_code == 2:  # `agent exec` ran into its own --timeout (set to our remaining budget)
            out.status = RolloutStatus.TIMEOUT
            out.error = f"openclaw stopped at its --timeout (the rollout budget of {ctx.budget_s:.0f}s)"
        return out

    def final_text(self, stdout: str) -> str | None:
        """``final`` of the JSON envelope (the last JSON object on stdout)."""
        text = stdout.strip()
        start = text.find("{")
        while start != -1:
            try:
                env = json.loads(text[start:])
            except ValueError:
                start = text.find("\n{", start + 1)
                start = start + 1 if start != -1 else -1
                continue
            final = env.get("final") if isinstance(env, dict) else None
            if isinstance(final, dict):
                return final.get("text") or json.dumps(final)
            return final if isinstance(final, str) else None
        return None
