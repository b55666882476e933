"""Config generation of the CLI adapters: each points the harness at the rollout's proxy URL with
the rollout secret, selects the right wire API, switches off outside traffic and auto-approves."""

from __future__ import annotations

import json

import pytest
from harness_helpers import AN, OA

from openforge.core.errors import ConfigError
from openforge.harnesses.claude_code import ClaudeCodeHarness
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.openclaw import OpenClawHarness
from openforge.harnesses.pi import PiHarness
from openforge.harnesses.versions import NODE, NPM_PINS
from openforge.harnesses.zeroclaw import ZeroClawHarness
from openforge.plugins import harness_class

tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11+")




def test_codex_config_and_argv(ctx):
    h = CodexHarness()
    cfg = tomllib.loads(h.config_files(ctx)[".codex/config.toml"])
    prov = cfg["model_providers"]["openforge"]
    assert cfg["model_provider"] == "openforge" and cfg["model"] == "pol"
    assert prov["base_url"] == OA and prov["wire_api"] == "responses" and prov["env_key"] == "OPENFORGE_API_KEY"
    assert cfg["analytics"]["enabled"] is False and cfg["features"]["plugins"] is False
    assert cfg["approval_policy"] == "never" and cfg["sandbox_mode"] == "danger-full-access"
    env = h.environment(ctx)
    assert env["CODEX_HOME"] == str(ctx.home / ".codex") and env["OPENFORGE_API_KEY"] == "sk-roll"
    argv = h.command(ctx, "/x/codex")
    assert argv[:2] == ["/x/codex", "exec"] and argv[-1] == "write hi to out.txt"
    for flag in ("--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--json"):
        assert flag in argv
    assert argv[argv.index("--disable") + 1] == "plugins" and "analytics.enabled=false" in argv
    events = '{"type":"thread.started"}\n{"type":"item.completed","item":{"type":"agent_message","text":"done!"}}\n'
    assert h.final_text(events) == "done!"


def test_every_harness_process_gets_the_gemini_endpoint(ctx):
    """The names the Gemini SDKs read (google-genai, gemini-cli): the same root as Anthropic's, the same key."""
    env = ctx.base_env()
    assert env["GOOGLE_GEMINI_BASE_URL"] == ctx.gemini_base_url == AN and env["GEMINI_API_KEY"] == "sk-roll"
    assert env["ANTHROPIC_BASE_URL"] == AN and env["OPENAI_BASE_URL"] == OA


def test_claude_code_env_and_argv(ctx):
    h = ClaudeCodeHarness()
    env = h.environment(ctx)
    assert env["ANTHROPIC_BASE_URL"] == AN and env["ANTHROPIC_API_KEY"] == "sk-roll" and env["ANTHROPIC_MODEL"] == "pol"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["IS_SANDBOX"] == "1"
    assert env["CLAUDE_CONFIG_DIR"].startswith(str(ctx.home))
    argv = h.command(ctx, "claude")
    assert argv[:2] == ["claude", "-p"] and "--dangerously-skip-permissions" in argv
    assert h.final_text('{"type":"system"}\n{"type":"result","result":"ok","is_error":false}') == "ok"


@pytest.mark.parametrize(("wire", "api", "base"), [("chat", "openai-completions", OA),
                                                   ("responses", "openai-responses", OA),
                                                   ("messages", "anthropic-messages", AN)])
def test_pi_models_json_per_wire(ctx, wire, api, base):
    h = PiHarness(wire_api=wire)
    prov = json.loads(h.config_files(ctx)[".pi/agent/models.json"])["providers"]["openforge"]
    assert prov["api"] == api and prov["baseUrl"] == base and prov["apiKey"] == "sk-roll"
    assert prov["models"][0]["id"] == "pol" and h.wire_api == wire
    env = h.environment(ctx)
    assert env["PI_OFFLINE"] == "1" and env["PI_CODING_AGENT_DIR"] == str(ctx.home / ".pi" / "agent")
    argv = h.command(ctx, "pi")
    assert argv[argv.index("--provider") + 1] == "openforge" and argv[-1] == "write hi to out.txt"


@pytest.mark.parametrize("wire", ["chat", "responses", "messages"])
def test_openclaw_config_per_wire(ctx, wire):
    h = OpenClawHarness(wire_api=wire)
    cfg = json.loads(next(iter(h.config_files(ctx).values())))
    prov = cfg["models"]["providers"]["openforge"]
    assert cfg["models"]["mode"] == "replace" and prov["baseUrl"] == (AN if wire == "messages" else OA)
    assert cfg["agents"]["defaults"]["model"]["primary"] == "openforge/pol"
    argv = h.command(ctx, "openclaw")
    assert argv[1:3] == ["agent", "exec"] and argv[argv.index("--cwd") + 1] == str(ctx.workdir)
    assert h.final_text('log line\n{"final": "ok", "usage": {}}') == "ok"


def test_zeroclaw_config_and_binary_lookup(ctx, monkeypatch, tmp_path):
    h = ZeroClawHarness(wire_api="responses")
    cfg = tomllib.loads(h.config_files(ctx)[".zeroclaw/config.toml"])
    prov = cfg["providers"]["models"]["custom"]["openforge"]
    assert prov == {"uri": OA, "api_key": "sk-roll", "model": "pol", "wire_api": "responses"}
    assert cfg["agents"]["main"]["model_provider"] == "custom.openforge"
    assert cfg["risk_profiles"][cfg["agents"]["main"]["risk_profile"]]["level"] == "full"
    assert h.command(ctx, "zc")[:4] == ["zc", "agent", "-a", "main"]
    fake = tmp_path / "zeroclaw"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ZEROCLAW_BIN", str(fake))
    assert ZeroClawHarness().resolve_executable() == str(fake)
    assert ZeroClawHarness(image="ghcr.io/x/zeroclaw:1").resolve_executable() in ("zeroclaw", str(fake))


def test_bad_wire_api_is_config_error():
    for cls in (PiHarness, OpenClawHarness, ZeroClawHarness):
        with pytest.raises(ConfigError, match="wire_api must be one of"):
            cls(wire_api="grpc")


def test_pins_in_one_place_and_registry_classes():
    assert NPM_PINS["openclaw"].min_node <= NODE.major_minor and NODE.major_minor >= (24, 16)
    for name, cls in [("codex", CodexHarness), ("claude-code", ClaudeCodeHarness), ("pi", PiHarness),
                      ("openclaw", OpenClawHarness), ("zeroclaw", ZeroClawHarness)]:
        assert harness_class(name) is cls and cls.name == name
