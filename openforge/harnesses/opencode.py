"""``opencode``: the real opencode CLI (npm ``opencode-ai``, a native binary) against the proxy's
OpenAI Chat Completions API; and :class:`OpencodeFamilyHarness`, what opencode and its forks
(``kilocode``) share.

Owns: the generated config (:func:`opencode_config`: one ``openforge`` provider on the bundled
``@ai-sdk/openai-compatible`` SDK, the policy as the default and small model, every tool permission
allowed, sharing / auto-update / LSP / formatter off), the offline environment (the config file named
by ``$<PREFIX>_CONFIG``; no models.dev fetch, no default plugins, no Claude Code prompt import:
``$<PREFIX>_DISABLE_*``) and the headless argv ``opencode run --pure --auto --format json -m
openforge/M --dir WORKDIR TASK``. The final answer is the text of the last ``text`` event. A fork
differs in its env-var prefix, config path, ``$schema`` and extra offline switches only.

Declarative data (for a harness spec): package ``opencode-ai`` (``versions.NPM_PINS["opencode"]``),
wire ``chat``, config file ``$XDG_CONFIG_HOME/opencode/opencode.json`` (also named by
``$OPENCODE_CONFIG``), base URL / key / model in that file.
"""

from __future__ import annotations

import json
from typing import ClassVar

from ..harness import RolloutContext
from .cli import CliHarness, last_json_event
from .versions import NPM_PINS

__all__ = ["OpencodeFamilyHarness", "OpencodeHarness", "opencode_config"]

CONFIG_PATH = ".config/opencode/opencode.json"
SCHEMA = "https://opencode.ai/config.json"
#: ``$<PREFIX>_<switch>=1`` for each: what keeps ``run`` of opencode and its forks off every host but the proxy
OFFLINE_SWITCHES = ("DISABLE_MODELS_FETCH", "DISABLE_AUTOUPDATE", "DISABLE_SHARE", "DISABLE_LSP_DOWNLOAD",
                    "DISABLE_DEFAULT_PLUGINS", "DISABLE_CLAUDE_CODE", "DISABLE_EXTERNAL_SKILLS",
                    "DISABLE_PROJECT_CONFIG")


def opencode_config(*, base_url: str, api_key: str, model: str, context_window: int = 128_000,
                    max_tokens: int = 4096, schema: str | None = SCHEMA) -> str:
    """The config with one ``openforge`` provider at ``base_url`` (the proxy's ``…/v1``); ``schema``
    (its ``$schema``) None for a fork that has none."""
    cfg = {
        **({"$schema": schema} if schema else {}),
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


class OpencodeFamilyHarness(CliHarness):
    """opencode or a fork of it: a subclass names its ``env_prefix``, ``config_path`` (below the
    private HOME), ``config_schema`` and any ``extra_offline_env``."""

    wire_api = "chat"
    env_prefix: ClassVar[str]
    config_path: ClassVar[str]
    config_schema: ClassVar[str | None] = None
    #: offline switches of the fork's own, after the shared ``$<PREFIX>_DISABLE_*`` ones
    extra_offline_env: ClassVar[dict[str, str]] = {}

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {self.config_path: opencode_config(base_url=ctx.openai_base_url, api_key=ctx.api_key,
                                                  model=ctx.model, schema=self.config_schema)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        prefix = self.env_prefix
        return {f"{prefix}_CONFIG": str(ctx.home / self.config_path),
                **{f"{prefix}_{switch}": "1" for switch in OFFLINE_SWITCHES}, **self.extra_offline_env,
                "NO_COLOR": "1"}

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


class OpencodeHarness(OpencodeFamilyHarness):
    name = "opencode"
    executable = "opencode"
    install_hint = f"forge harness install opencode  (npm install {NPM_PINS['opencode'].spec})"
    env_prefix = "OPENCODE"
    config_path = CONFIG_PATH
    config_schema = SCHEMA
