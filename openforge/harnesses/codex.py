"""``codex``: the real OpenAI Codex CLI (``@openai/codex``) against the proxy's Responses API.

Owns: the generated ``$CODEX_HOME/config.toml`` (a custom ``openforge`` model provider with
``wire_api = "responses"`` — Codex speaks nothing else — analytics, feedback and update checks off)
and the headless argv ``codex exec --json --dangerously-bypass-approvals-and-sandbox --disable
plugins …`` (plugins reach github.com/chatgpt.com; analytics reaches ab.chatgpt.com).
"""

from __future__ import annotations

import json

from ..harness import RolloutContext
from .cli import CliHarness, last_json_event
from .versions import NPM_PINS

__all__ = ["CodexHarness", "codex_config"]


def _s(value: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML)."""
    return json.dumps(value)


def codex_config(*, base_url: str, model: str, stream_idle_timeout_ms: int = 600_000) -> str:
    """``config.toml`` pointing Codex at ``base_url`` (the proxy's ``…/v1``) with no outside traffic."""
    return "\n".join([
        f"model = {_s(model)}",
        'model_provider = "openforge"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.openforge]",
        'name = "openforge"',
        f"base_url = {_s(base_url)}",
        'env_key = "OPENFORGE_API_KEY"',
        'wire_api = "responses"',
        "request_max_retries = 1",
        "stream_max_retries = 1",
        f"stream_idle_timeout_ms = {int(stream_idle_timeout_ms)}",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",
        "",
    ])


class CodexHarness(CliHarness):
    name = "codex"
    wire_api = "responses"
    executable = "codex"
    install_hint = f"forge harness install codex  (npm install {NPM_PINS['codex'].spec})"

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {".codex/config.toml": codex_config(base_url=ctx.openai_base_url, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"CODEX_HOME": str(ctx.home / ".codex"), "OPENFORGE_API_KEY": ctx.api_key, "NO_COLOR": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "exec", "--skip-git-repo-check", "--ephemeral", "--json",
                "--dangerously-bypass-approvals-and-sandbox", "--disable", "plugins",
                "-c", "analytics.enabled=false", "-m", ctx.model, "-C", str(ctx.workdir),
                *self.extra_args, ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        """The text of the last ``agent_message`` item in the ``--json`` event stream."""

        def pick(ev: dict) -> str | None:
            item = ev.get("item")
            return item.get("text") if isinstance(item, dict) and item.get("type") == "agent_message" else None

        return last_json_event(stdout, pick)
