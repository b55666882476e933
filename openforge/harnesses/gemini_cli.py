"""``gemini-cli``: the real Gemini CLI (``@google/gemini-cli``) against the proxy's Gemini API
(``generateContent`` / ``streamGenerateContent``).

Owns: the generated ``~/.gemini/settings.json`` (API-key auth, usage statistics, telemetry, update
checks and the model router off, every tool call approved), the environment that points it at the
proxy (``GOOGLE_GEMINI_BASE_URL`` + ``GEMINI_API_KEY``, both also in the rollout's base environment)
and the headless argv ``gemini -p TASK --yolo --output-format json -m M``. The final answer is the
``response`` of the JSON document it prints.

Declarative data (for a harness spec): package ``@google/gemini-cli``
(``versions.NPM_PINS["gemini-cli"]``), wire ``gemini``, config file ``~/.gemini/settings.json``, base
URL / key through ``GOOGLE_GEMINI_BASE_URL`` / ``GEMINI_API_KEY``, model through ``-m``.
"""

from __future__ import annotations

import json

from ..harness import RolloutContext
from .cli import CliHarness
from .versions import NPM_PINS

__all__ = ["GeminiCliHarness", "gemini_cli_settings"]

SETTINGS_PATH = ".gemini/settings.json"


def gemini_cli_settings(*, model: str) -> str:
    """``settings.json``: API-key auth, nothing phoned home, no approvals, no auxiliary model calls."""
    cfg = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "enableAutoUpdate": False,
                    "enableAutoUpdateNotification": False, "checkpointing": {"enabled": False}},
        "model": {"name": model},
        "tools": {"autoAccept": True},
        "ide": {"enabled": False},
    }
    return json.dumps(cfg, indent=2)


class GeminiCliHarness(CliHarness):
    name = "gemini-cli"
    wire_api = "gemini"
    executable = "gemini"
    install_hint = f"forge harness install gemini-cli  (npm install {NPM_PINS['gemini-cli'].spec})"

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {SETTINGS_PATH: gemini_cli_settings(model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"GOOGLE_GEMINI_BASE_URL": ctx.gemini_base_url, "GEMINI_API_KEY": ctx.api_key,
                "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_TELEMETRY_ENABLED": "false",
                "GEMINI_SANDBOX": "false", "NO_COLOR": "1", "NO_BROWSER": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "--yolo", "--output-format", "json", "-m", ctx.model, *self.extra_args,
                "-p", ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        """``response`` of the JSON document on stdout (``--output-format json``)."""
        text = stdout.strip()
        start = text.find("{")
        if start == -1:
            return text or None
        try:
            doc = json.loads(text[start:])
        except ValueError:
            return text or None
        resp = doc.get("response") if isinstance(doc, dict) else None
        return resp if isinstance(resp, str) else None
