"""``claude-code``: the real Claude Code CLI (``@anthropic-ai/claude-code``) against the proxy's
Anthropic Messages API.

Owns: the environment that points ``claude -p`` at the proxy (``ANTHROPIC_BASE_URL`` without
``/v1``, the per-rollout key as ``x-api-key``, every model slot set to the policy), switches off
non-essential traffic (telemetry, error reporting, auto-update: otherwise api.anthropic.com is
contacted), auto-approves tools (``--dangerously-skip-permissions``, which as root also needs
``IS_SANDBOX=1``) and keeps its config below the rollout's private HOME.
"""

from __future__ import annotations

from ..harness import RolloutContext
from .cli import CliHarness, last_json_event
from .versions import NPM_PINS

__all__ = ["ClaudeCodeHarness", "claude_code_env"]


def claude_code_env(*, base_url: str, api_key: str, model: str, config_dir: str,
                    api_timeout_ms: int = 600_000) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "CLAUDE_CONFIG_DIR": config_dir,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root ("yes" does not count)
        "API_TIMEOUT_MS": str(api_timeout_ms),
    }


class ClaudeCodeHarness(CliHarness):
    name = "claude-code"
    wire_api = "messages"
    executable = "claude"
    install_hint = f"forge harness install claude-code  (npm install {NPM_PINS['claude-code'].spec})"

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return claude_code_env(base_url=ctx.anthropic_base_url, api_key=ctx.api_key, model=ctx.model,
                               config_dir=str(ctx.home / ".claude"))

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "-p", "--dangerously-skip-permissions", "--output-format", "stream-json", "--verbose",
                "--model", ctx.model, *self.extra_args, ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        """``result`` of the final ``{"type": "result"}`` event of the stream-json output."""
        return last_json_event(stdout, lambda ev: ev.get("result") if ev.get("type") == "result" else None)
