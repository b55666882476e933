"""``crush``: Charm's Crush CLI (npm ``@charmland/crush``, a Go binary) against the proxy, over Chat
Completions (``openai-compat``) or Anthropic Messages (``anthropic``).

Owns: the generated ``crush.json`` (``$CRUSH_GLOBAL_CONFIG/crush.json``: one ``openforge`` provider
with the policy as its only model, no embedded providers, no model discovery, no provider
auto-update, no metrics; the policy as the large and the small model), the offline environment and
the headless argv ``crush run --quiet --cwd WORKDIR --data-dir DATA -m openforge/M TASK``.
``crush run`` approves every tool call of its session (non-interactive mode) and prints the
assistant's text on stdout.

Installing: the npm package has no binary of its own; its ``postinstall`` downloads
``crush_<version>_Linux_x86_64.tar.gz`` from github.com/charmbracelet/crush/releases. Where the
installer cannot reach github.com, ``forge harness install crush`` fails with that reason, and
``binary=`` / ``$OPENFORGE_CRUSH_BIN`` may point at a crush binary obtained otherwise.

Declarative data (for a harness spec): package ``@charmland/crush`` (``versions.NPM_PINS["crush"]``),
wires ``chat`` (default) and ``messages``, config file ``~/.config/crush/crush.json`` (the directory
named by ``$CRUSH_GLOBAL_CONFIG``), base URL / key / model in that file, model also through ``-m``.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ConfigError
from ..harness import RolloutContext
from .cli import CliHarness
from .versions import NPM_PINS

__all__ = ["CRUSH_TYPES", "CrushHarness", "crush_config"]

#: openforge wire API → crush's provider ``type``.
CRUSH_TYPES = {"chat": "openai-compat", "messages": "anthropic"}
CONFIG_DIR = ".config/crush"
DATA_DIR = ".local/share/crush-data"


def _check_wire(wire_api: str) -> str:
    if wire_api not in CRUSH_TYPES:
        raise ConfigError(f"crush: wire_api must be one of {', '.join(CRUSH_TYPES)}, not {wire_api!r}")
    return CRUSH_TYPES[wire_api]


def crush_config(*, wire_api: str, openai_base_url: str, anthropic_base_url: str, api_key: str, model: str,
                 context_window: int = 128_000, max_tokens: int = 4096) -> str:
    """``crush.json`` with the ``openforge`` provider as the only one crush knows."""
    ptype = _check_wire(wire_api)
    provider = {
        "name": "openforge",
        "type": ptype,
        # crush's anthropic client appends /v1/messages to the base URL (as the Anthropic SDK does)
        "base_url": anthropic_base_url if wire_api == "messages" else openai_base_url,
        "api_key": api_key,
        "discover_models": False,
        "models": [{"id": model, "name": model, "context_window": context_window,
                    "default_max_tokens": max_tokens, "can_reason": False, "supports_attachments": False,
                    "cost_per_1m_in": 0, "cost_per_1m_out": 0}],
    }
    cfg = {
        "$schema": "https://charm.land/crush.json",
        "providers": {"openforge": provider},
        "models": {"large": {"model": model, "provider": "openforge"},
                   "small": {"model": model, "provider": "openforge"}},
        "options": {"disable_provider_auto_update": True, "disable_default_providers": True,
                    "disable_metrics": True, "attribution": {"trailer_style": "none"}},
    }
    return json.dumps(cfg, indent=2)


class CrushHarness(CliHarness):
    name = "crush"
    wire_api = "chat"
    wire_apis = tuple(CRUSH_TYPES)
    executable = "crush"
    install_hint = (f"forge harness install crush  (npm install {NPM_PINS['crush'].spec}, whose postinstall "
                    "downloads the binary from github.com/charmbracelet/crush/releases; or set "
                    "OPENFORGE_CRUSH_BIN=/path/to/crush)")

    def __init__(self, *, wire_api: str = "chat", **kw: Any):
        super().__init__(**kw)
        _check_wire(wire_api)
        self.wire_api = wire_api  # type: ignore[misc]

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {f"{CONFIG_DIR}/crush.json": crush_config(
            wire_api=self.wire_api, openai_base_url=ctx.openai_base_url,
            anthropic_base_url=ctx.anthropic_base_url, api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"CRUSH_GLOBAL_CONFIG": str(ctx.home / CONFIG_DIR), "CRUSH_GLOBAL_DATA": str(ctx.home / DATA_DIR),
                "CRUSH_DISABLE_PROVIDER_AUTO_UPDATE": "1", "CRUSH_DISABLE_METRICS": "1", "NO_COLOR": "1"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "run", "--quiet", "--cwd", str(ctx.workdir), "--data-dir", str(ctx.home / DATA_DIR),
                "-m", f"openforge/{ctx.model}", *self.extra_args, ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        return stdout.strip() or None
