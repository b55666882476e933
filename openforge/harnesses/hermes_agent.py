"""``hermes-agent``: Nous Research's Hermes Agent CLI (PyPI ``hermes-agent``, executable ``hermes``)
against the proxy, one ``--oneshot`` run headless.

Declarative data (a spec later): package ``PYPI_PINS["hermes-agent"]``, executable ``hermes`` in its
own venv; wire ``chat`` (Hermes's ``api_mode: chat_completions`` on a ``custom`` provider); argv
``hermes --oneshot TASK --provider custom -m <model> --toolsets terminal,file --yolo --ignore-rules
--accept-hooks``; config ``$HERMES_HOME/config.yaml`` (``$HERMES_HOME`` = ``<private HOME>/.hermes``)
with ``model.provider = custom``, ``model.base_url`` (the proxy's ``…/v1``), ``model.api_key``,
``model.default``, ``model.api_mode``; env ``HERMES_HOME`` and the update / telemetry switches.
``--oneshot`` prints only the final response text on stdout and bypasses approvals.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ConfigError
from ..harness import RolloutContext
from .pypi_cli import PypiCliHarness, pypi_install_hint

__all__ = ["HERMES_API_MODES", "HermesAgentHarness", "hermes_config"]

#: openforge wire API → Hermes's ``api_mode``.
HERMES_API_MODES = {"chat": "chat_completions"}


def hermes_config(*, wire_api: str, base_url: str, api_key: str, model: str, max_turns: int = 30) -> str:
    """``config.yaml`` (JSON is YAML) pointing Hermes's ``custom`` provider at the proxy."""
    if wire_api not in HERMES_API_MODES:
        raise ConfigError(f"hermes-agent: wire_api must be one of {', '.join(HERMES_API_MODES)}, not {wire_api!r}")
    return json.dumps({
        "model": {"provider": "custom", "default": model, "base_url": base_url, "api_key": api_key,
                  "api_mode": HERMES_API_MODES[wire_api]},
        "agent": {"max_turns": max_turns},
        "hooks_auto_accept": True,
    }, indent=2)


class HermesAgentHarness(PypiCliHarness):
    name = "hermes-agent"
    wire_api = "chat"
    wire_apis = tuple(HERMES_API_MODES)
    executable = "hermes"
    install_hint = pypi_install_hint("hermes-agent")

    def __init__(self, *, wire_api: str = "chat", toolsets: str = "terminal,file", max_turns: int = 30, **kw: Any):
        super().__init__(**kw)
        if wire_api not in HERMES_API_MODES:
            raise ConfigError(f"hermes-agent: wire_api must be one of {', '.join(HERMES_API_MODES)}, "
                              f"not {wire_api!r}")
        self.wire_api = wire_api  # type: ignore[misc]
        self.toolsets, self.max_turns = toolsets, max_turns

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {".hermes/config.yaml": hermes_config(wire_api=self.wire_api, base_url=ctx.openai_base_url,
                                                     api_key=ctx.api_key, model=ctx.model,
                                                     max_turns=self.max_turns)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"HERMES_HOME": str(ctx.home / ".hermes"), "HERMES_ACCEPT_HOOKS": "1", "NO_COLOR": "1",
                "TERM": "dumb"}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "--provider", "custom", "-m", ctx.model, "--toolsets", self.toolsets, "--yolo",
                "--ignore-rules", "--accept-hooks", *self.extra_args, "--oneshot", ctx.instruction]

    def final_text(self, stdout: str) -> str | None:
        return stdout.strip() or None
