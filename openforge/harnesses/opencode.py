"""``opencode``: the real opencode CLI (npm ``opencode-ai``, a native binary) against the proxy's
OpenAI Chat Completions API.

Owns: the generated ``opencode.json`` (one ``openforge`` provider on the bundled
``@ai-sdk/openai-compatible`` SDK, the policy as the default model, every tool permission allowed,
sharing / auto-update / LSP downloads off), the offline environment (no models.dev fetch, no default
plugins, no Claude Code prompt import) and the headless argv ``opencode run --pure --auto --format
json -m openforge/M --dir WORKDIR TASK``. The final answer is the text of the last ``text`` event.

Declarative data (for a harness spec): package ``opencode-ai`` (``versions.NPM_PINS["opencode"]``),
wire ``chat``, config file ``$XDG_CONFIG_HOME/opencode/opencode.json`` (also named by
``$OPENCODE_CONFIG``), base URL / key / model in that file.
"""

from __future__ import annotations

import json

from ..harness import RolloutContext
from .cli import CliHarness, last_json_event
from .versions import NPM_PINS

__all__ = ["OpencodeHarness", "opencode_config"]

CONFIG_PATH = ".config/opencode/opencode.json"


def opencode_config(*, base_url: str, api_key: str, model: str, context_window: int = 128_000,
                    max_tokens: int = 4096) -> str:
    """``opencode.json`` with one ``openforge`` provider at ``base_url`` (the proxy's ``…/v1``)."""
    cfg = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"openforge": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "openforge",
            "options": {"baseURL": base_url, "apiKey": api_key},
            "models": {model: {"name": model, "limit": {"context": context_window, "output": max_tokens}}},
        }},
        "model": f"openforge/{model}",
        "small_model": f"openforge/{model}",
        "enabled_providers": ["openforge"],
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
        "autoupdate": False,
        "share": "disabled",
        "lsp": False,
        "formatter": False,
    }
    return json.dumps(cfg, indent=2)


class OpencodeHarness(CliHarness):
    name = "opencode"
    wire_api = "chat"
    executable = "opencode"
    install_hint = f"forge harness install opencode  (npm install {NPM_PINS['opencode'].spec})"

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {CONFIG_PATH: opencode_config(base_url=ctx.openai_base_url, api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"OPENCODE_CONFIG": str(ctx.home / CONFIG_PATH), "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1", "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
                "OPENCODE_DISABLE_PROJECT_CONFIG": "1", "NO_COLOR": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "run", "--pure", "--auto", "--title", "openforge", "--format", "json", "-m", f"openforge/{ctx.model}",
                "--dir", str(ctx.workdir), *self.extra_args, ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        """The text of the last ``{"type": "text", "part": {"text": ...}}`` event."""

        def pick(ev: dict) -> str | None:
            part = ev.get("part")
            if ev.get("type") == "text" and isinstance(part, dict) and isinstance(part.get("text"), str):
                return part["text"]
            return None

        return last_json_event(stdout, pick)
