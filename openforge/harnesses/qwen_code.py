"""``qwen-code``: the real Qwen Code CLI (``@qwen-code/qwen-code``, Node >= 22) against the proxy,
over a selectable wire API (Chat Completions, Responses, Anthropic Messages or Gemini).

Owns: the generated ``~/.qwen/settings.json`` (the auth type for the wire, usage statistics,
telemetry and update checks off, every tool call approved), the environment that points the chosen
SDK at the proxy (``OPENAI_*`` / ``ANTHROPIC_*`` / ``GOOGLE_GEMINI_BASE_URL`` + ``GEMINI_API_KEY``)
and the headless argv ``qwen --auth-type T --yolo --output-format json -m M -p TASK``. The final
answer is the ``result`` of the last ``{"type": "result"}`` event.

Declarative data (for a harness spec): package ``@qwen-code/qwen-code``
(``versions.NPM_PINS["qwen-code"]``), wires ``chat`` (default), ``responses``, ``messages``,
``gemini``; config file ``~/.qwen/settings.json``; base URL / key through the SDK's environment.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ConfigError
from ..harness import RolloutContext
from .cli import CliHarness
from .versions import NPM_PINS

__all__ = ["QWEN_AUTH_TYPES", "QwenCodeHarness", "qwen_code_settings"]

#: openforge wire API → qwen-code's ``--auth-type``.
QWEN_AUTH_TYPES = {"chat": "openai", "responses": "openai-responses", "messages": "anthropic", "gemini": "gemini"}
SETTINGS_PATH = ".qwen/settings.json"


def _check_wire(wire_api: str) -> str:
    if wire_api not in QWEN_AUTH_TYPES:
        raise ConfigError(f"qwen-code: wire_api must be one of {', '.join(QWEN_AUTH_TYPES)}, not {wire_api!r}")
    return QWEN_AUTH_TYPES[wire_api]


def qwen_code_settings(*, wire_api: str, model: str) -> str:
    """``settings.json``: the wire's auth type, nothing phoned home, no approvals."""
    cfg = {
        "security": {"auth": {"selectedType": _check_wire(wire_api)}, "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "enableAutoUpdate": False,
                    "checkpointing": {"enabled": False}},
        "model": {"name": model},
        "tools": {"approvalMode": "yolo"},
        "ide": {"enabled": False},
    }
    return json.dumps(cfg, indent=2)


class QwenCodeHarness(CliHarness):
    name = "qwen-code"
    wire_api = "chat"
    wire_apis = tuple(QWEN_AUTH_TYPES)
    executable = "qwen"
    install_hint = f"forge harness install qwen-code  (npm install {NPM_PINS['qwen-code'].spec}; Node >= 22)"

    def __init__(self, *, wire_api: str = "chat", **kw: Any):
        super().__init__(**kw)
        _check_wire(wire_api)
        self.wire_api = wire_api  # type: ignore[misc]

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {SETTINGS_PATH: qwen_code_settings(wire_api=self.wire_api, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"OPENAI_BASE_URL": ctx.openai_base_url, "OPENAI_API_KEY": ctx.api_key, "OPENAI_MODEL": ctx.model,
                "ANTHROPIC_BASE_URL": ctx.anthropic_base_url, "ANTHROPIC_API_KEY": ctx.api_key,
                "ANTHROPIC_MODEL": ctx.model, "GOOGLE_GEMINI_BASE_URL": ctx.gemini_base_url,
                "GEMINI_API_KEY": ctx.api_key, "GEMINI_MODEL": ctx.model, "QWEN_CODE_NO_RELAUNCH": "true",
                "GEMINI_CLI_NO_RELAUNCH": "true", "QWEN_TELEMETRY_ENABLED": "false", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1", "NO_COLOR": "1",
                "NO_BROWSER": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "--auth-type", QWEN_AUTH_TYPES[self.wire_api], "--yolo", "--output-format", "json",
                "-m", ctx.model, *self.extra_args, "-p", ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        """``result`` of the last ``{"type": "result"}`` event (``--output-format json`` prints a
        JSON array of events; ``stream-json`` one event a line)."""
        text = stdout.strip()
        start = text.find("[")
        try:
            events = json.loads(text[start:]) if start != -1 else None
        except ValueError:
            events = None
        if not isinstance(events, list):
            events = []
            for line in text.splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        for ev in reversed(events):
            if isinstance(ev, dict) and ev.get("type") == "result" and isinstance(ev.get("result"), str):
                return ev["result"]
        return None
