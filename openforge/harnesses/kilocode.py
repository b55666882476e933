"""``kilocode``: the real Kilo Code CLI (npm ``@kilocode/cli``, a native binary forked from opencode)
against the proxy's OpenAI Chat Completions API.

Owns: the generated ``kilo.json`` (one ``openforge`` provider on the bundled
``@ai-sdk/openai-compatible`` SDK, the policy as the default and small model, every tool permission
allowed, sharing / auto-update / LSP / formatter off), the offline environment (no models.dev fetch,
no default plugins, no Claude Code import, no telemetry, session ingest, presence or daemon) and the
headless argv ``kilo run --pure --auto --format json -m openforge/M --dir WORKDIR TASK``. The final
answer is the text of the last ``text`` event.

Declarative data (for a harness spec): package ``@kilocode/cli`` (``versions.NPM_PINS["kilocode"]``,
executable ``kilo``), wire ``chat``, config file ``$HOME/.config/kilo/kilo.json`` named by
``$KILO_CONFIG``, base URL / key / model in that file.
"""

from __future__ import annotations

import json

from ..harness import RolloutContext
from .cli import CliHarness, last_json_event
from .versions import NPM_PINS

__all__ = ["KilocodeHarness", "kilocode_config"]

CONFIG_PATH = ".config/kilo/kilo.json"

#: switches that keep ``kilo run`` from reaching any host but the proxy
OFFLINE_ENV = {
    "KILO_DISABLE_MODELS_FETCH": "1", "KILO_DISABLE_AUTOUPDATE": "1", "KILO_DISABLE_SHARE": "1",
    "KILO_DISABLE_LSP_DOWNLOAD": "1", "KILO_DISABLE_DEFAULT_PLUGINS": "1", "KILO_DISABLE_CLAUDE_CODE": "1",
    "KILO_DISABLE_EXTERNAL_SKILLS": "1", "KILO_DISABLE_PROJECT_CONFIG": "1",
    "KILO_DISABLE_SESSION_INGEST": "1", "KILO_DISABLE_PRESENCE": "1", "KILO_DISABLE_CODEBASE_INDEXING": "1",
    "KILO_DISABLE_EMBEDDED_WEB_UI": "1", "KILO_NO_DAEMON": "1", "KILO_TELEMETRY_LEVEL": "off",
    "NO_COLOR": "1",
}


def kilocode_config(*, base_url: str, api_key: str, model: str, context_window: int = 128_000,
                    max_tokens: int = 4096) -> str:
    """``kilo.json`` with one ``openforge`` provider at ``base_url`` (the proxy's ``…/v1``)."""
    cfg = {
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


class KilocodeHarness(CliHarness):
    name = "kilocode"
    wire_api = "chat"
    executable = "kilo"
    install_hint = f"forge harness install kilocode  (npm install {NPM_PINS['kilocode'].spec})"

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {CONFIG_PATH: kilocode_config(base_url=ctx.openai_base_url, api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"KILO_CONFIG": str(ctx.home / CONFIG_PATH), **OFFLINE_ENV}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "run", "--pure", "--auto", "--title", "openforge", "--format", "json",
                "-m", f"openforge/{ctx.model}", "--dir", str(ctx.workdir), *self.extra_args, ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        """The text of the last ``{"type": "text", "part": {"text": ...}}`` event."""

        def pick(ev: dict) -> str | None:
            part = ev.get("part")
            if ev.get("type") == "text" and isinstance(part, dict) and isinstance(part.get("text"), str):
                return part["text"]
            return None

        return last_json_event(stdout, pick)
