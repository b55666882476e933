"""``zeroclaw``: the ZeroClaw agent (Rust, zeroclaw-labs/zeroclaw) against the proxy.

Owns: the generated ``~/.zeroclaw/config.toml`` (schema 3: a ``custom.openforge`` model provider
with a selectable ``wire_api``, the ``main`` agent on it with the ``yolo`` risk profile — no
approvals) and the argv ``zeroclaw agent -a main -m TASK``. No registry reachable here ships a
ZeroClaw binary (PyPI's ``zeroclaw`` is an unrelated installer), so the executable comes from
``binary=``, ``$ZEROCLAW_BIN`` / ``$OPENFORGE_ZEROCLAW_BIN``, ``PATH``, or a container ``image``
(the Kubernetes launcher runs the rollout in that image, where ``zeroclaw`` is on PATH).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..core.errors import ConfigError, HarnessNotInstalled
from ..harness import RolloutContext
from .cli import CliHarness

__all__ = ["ZEROCLAW_APIS", "ZeroClawHarness", "zeroclaw_config"]

ZEROCLAW_APIS = {"chat": "chat_completions", "responses": "responses"}


def zeroclaw_config(*, wire_api: str, base_url: str, api_key: str, model: str) -> str:
    if wire_api not in ZEROCLAW_APIS:
        raise ConfigError(f"zeroclaw: wire_api must be one of {', '.join(ZEROCLAW_APIS)}, not {wire_api!r}")
    s = json.dumps
    return "\n".join([
        "schema_version = 3",
        "",
        "[providers.models.custom.openforge]",
        f"uri = {s(base_url)}",
        f"api_key = {s(api_key)}",
        f"model = {s(model)}",
        f"wire_api = {s(ZEROCLAW_APIS[wire_api])}",
        "",
        "[agents.main]",
        'model_provider = "custom.openforge"',
        'risk_profile = "yolo"',
        'runtime_profile = "default"',
        "",
        "[risk_profiles.yolo]",
        'level = "full"',
        "",
    ])


class ZeroClawHarness(CliHarness):
    name = "zeroclaw"
    wire_api = "chat"
    wire_apis = ("chat", "responses")
    executable = "zeroclaw"
    install_hint = ("no package anywhere: build zeroclaw (cargo install) or use a release binary, then set "
                    "ZEROCLAW_BIN=/path/to/zeroclaw (or pass image= for the kubernetes launcher)")

    def __init__(self, *, wire_api: str = "chat", image: str | None = None, **kw: Any):
        super().__init__(**kw)
        if wire_api not in ZEROCLAW_APIS:
            raise ConfigError(f"zeroclaw: wire_api must be one of {', '.join(ZEROCLAW_APIS)}, not {wire_api!r}")
        self.wire_api = wire_api  # type: ignore[misc]
        self.image = image

    def resolve_executable(self) -> str:
        if self.binary is None and os.environ.get("ZEROCLAW_BIN"):
            self.binary = os.environ["ZEROCLAW_BIN"]
        if self.image and not self.binary:
            return self.executable  # on PATH inside the image
        try:
            return super().resolve_executable()
        except HarnessNotInstalled as e:
            raise HarnessNotInstalled(f"zeroclaw binary not found: {self.install_hint}") from e

    def node_path_dirs(self) -> list[str]:
        return []

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {".zeroclaw/config.toml": zeroclaw_config(wire_api=self.wire_api, base_url=ctx.openai_base_url,
                                                         api_key=ctx.api_key, model=ctx.model)}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"NO_COLOR": "1"}  # config is read from $HOME/.zeroclaw (HOME is the private home)

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "agent", "-a", "main", *self.extra_args, "-m", ctx.instruction]
