"""Config generation of the opencode, gemini-cli, qwen-code and crush adapters: each points its CLI
at the rollout's proxy with the rollout secret, on the right wire, with outside traffic off and
tool calls approved; and each reads its final answer out of the CLI's own output format."""

from __future__ import annotations

import json

import pytest
from harness_helpers import AN, OA

from openforge.core.errors import ConfigError, HarnessNotInstalled
from openforge.harnesses import installer
from openforge.harnesses.crush import CrushHarness
from openforge.harnesses.gemini_cli import GeminiCliHarness
from openforge.harnesses.opencode import OpencodeHarness
from openforge.harnesses.qwen_code import QwenCodeHarness
from openforge.harnesses.versions import NPM_PINS
from openforge.plugins import harness_class


def test_opencode_config_env_argv_and_final_text(ctx):
    h = OpencodeHarness()
    files = h.config_files(ctx)
    cfg = json.loads(files[".config/opencode/opencode.json"])
    prov = cfg["provider"]["openforge"]
    assert prov["npm"] == "@ai-sdk/openai-compatible" and prov["options"] == {"baseURL": OA, "apiKey": "sk-roll"}
    assert list(prov["models"]) == ["pol"] and cfg["model"] == cfg["small_model"] == "openforge/pol"
    assert cfg["enabled_providers"] == ["openforge"] and cfg["autoupdate"] is False and cfg["share"] == "disabled"
    assert cfg["permission"]["bash"] == "allow" and cfg["permission"]["edit"] == "allow"
    env = h.environment(ctx)
    assert env["OPENCODE_CONFIG"] == str(ctx.home / ".config/opencode/opencode.json")
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "1" and env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    argv = h.command(ctx, "/x/opencode")
    assert argv[:2] == ["/x/opencode", "run"] and argv[-1] == "write hi to out.txt"
    assert "--auto" in argv and argv[argv.index("--format") + 1] == "json"
    assert argv[argv.index("-m") + 1] == "openforge/pol" and argv[argv.index("--dir") + 1] == str(ctx.workdir)
    assert "--title" in argv  # no title-generation call to the policy
    events = ('{"type":"step_start","part":{}}\n{"type":"text","part":{"type":"text","text":"first"}}\n'
              '{"type":"tool_use","part":{"tool":"bash"}}\n{"type":"text","part":{"type":"text","text":"done!"}}\n'
              '{"type":"step_finish","part":{"reason":"stop"}}\n')
    assert h.final_text(events) == "done!" and h.final_text("not json") is None


def test_gemini_cli_settings_env_argv_and_final_text(ctx):
    h = GeminiCliHarness()
    cfg = json.loads(h.config_files(ctx)[".gemini/settings.json"])
    assert cfg["security"]["auth"]["selectedType"] == "gemini-api-key" and cfg["model"]["name"] == "pol"
    assert cfg["privacy"]["usageStatisticsEnabled"] is False and cfg["telemetry"]["enabled"] is False
    assert cfg["general"]["disableAutoUpdate"] is True
    env = h.environment(ctx)
    assert env["GOOGLE_GEMINI_BASE_URL"] == AN and env["GEMINI_API_KEY"] == "sk-roll"
    argv = h.command(ctx, "/x/gemini")
    assert "--yolo" in argv and argv[argv.index("--output-format") + 1] == "json"
    assert argv[argv.index("-m") + 1] == "pol" and argv[-2:] == ["-p", "write hi to out.txt"]
    out = 'Loaded cached credentials.\n{\n  "session_id": "s",\n  "response": "done!",\n  "stats": {}\n}\n'
    assert h.final_text(out) == "done!"
    assert GeminiCliHarness.wire_api == "gemini"


@pytest.mark.parametrize(("wire", "auth"), [("chat", "openai"), ("responses", "openai-responses"),
                                            ("messages", "anthropic"), ("gemini", "gemini")])
def test_qwen_code_per_wire(ctx, wire, auth):
    h = QwenCodeHarness(wire_api=wire)
    cfg = json.loads(h.config_files(ctx)[".qwen/settings.json"])
    assert cfg["security"]["auth"]["selectedType"] == auth and cfg["tools"]["approvalMode"] == "yolo"
    assert cfg["privacy"]["usageStatisticsEnabled"] is False and cfg["telemetry"]["enabled"] is False
    env = h.environment(ctx)
    assert env["OPENAI_BASE_URL"] == OA and env["ANTHROPIC_BASE_URL"] == AN and env["GOOGLE_GEMINI_BASE_URL"] == AN
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == env["GEMINI_API_KEY"] == "sk-roll"
    argv = h.command(ctx, "/x/qwen")
    assert argv[argv.index("--auth-type") + 1] == auth and "--yolo" in argv
    assert argv[-2:] == ["-p", "write hi to out.txt"] and h.wire_api == wire


def test_qwen_code_final_text_json_array_and_stream():
    h = QwenCodeHarness()
    arr = json.dumps([{"type": "system"}, {"type": "assistant", "message": {}},
                      {"type": "result", "subtype": "success", "result": "done!"}])
    assert h.final_text("warning line\n" + arr) == "done!"
    stream = '{"type":"system"}\n{"type":"result","result":"streamed"}\n'
    assert h.final_text(stream) == "streamed" and h.final_text("nothing") is None


@pytest.mark.parametrize(("wire", "ptype", "base"), [("chat", "openai-compat", OA), ("messages", "anthropic", AN)])
def test_crush_config_per_wire(ctx, wire, ptype, base):
    h = CrushHarness(wire_api=wire)
    cfg = json.loads(h.config_files(ctx)[".config/crush/crush.json"])
    prov = cfg["providers"]["openforge"]
    assert prov["type"] == ptype and prov["base_url"] == base and prov["api_key"] == "sk-roll"
    assert [m["id"] for m in prov["models"]] == ["pol"] and prov["discover_models"] is False
    assert cfg["models"]["large"] == cfg["models"]["small"] == {"model": "pol", "provider": "openforge"}
    opts = cfg["options"]
    assert opts["disable_provider_auto_update"] and opts["disable_default_providers"] and opts["disable_metrics"]
    env = h.environment(ctx)
    assert env["CRUSH_GLOBAL_CONFIG"] == str(ctx.home / ".config/crush") and env["CRUSH_DISABLE_METRICS"] == "1"
    argv = h.command(ctx, "/x/crush")
    assert argv[:2] == ["/x/crush", "run"] and argv[argv.index("-m") + 1] == "openforge/pol"
    assert argv[argv.index("--cwd") + 1] == str(ctx.workdir) and argv[-1] == "write hi to out.txt"


@pytest.mark.parametrize("cls", [QwenCodeHarness, CrushHarness])
def test_bad_wire_is_a_config_error_naming_the_choices(cls):
    with pytest.raises(ConfigError, match="wire_api must be one of"):
        cls(wire_api="smoke-signals")


def test_crush_not_installed_says_how(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path))
    monkeypatch.delenv("OPENFORGE_CRUSH_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HarnessNotInstalled, match=r"github\.com/charmbracelet/crush/releases"):
        CrushHarness().resolve_executable()


@pytest.mark.parametrize(("name", "package", "exe"), [
    ("opencode", "opencode-ai", "opencode"), ("gemini-cli", "@google/gemini-cli", "gemini"),
    ("qwen-code", "@qwen-code/qwen-code", "qwen"), ("crush", "@charmland/crush", "crush")])
def test_pinned_and_registered(name, package, exe, tmp_path):
    pin = NPM_PINS[name]
    assert pin.package == package and pin.executable == exe and pin.version.count(".") == 2
    cls = harness_class(name)
    assert cls.name == name and cls.executable == exe and cls.wire_api in (cls.wire_apis or (cls.wire_api,))
    assert pin.spec in cls.install_hint
    assert installer.find_executable(name, tmp_path) is None  # an empty cache has none of them


def test_a_failed_crush_install_says_its_binary_comes_from_github(monkeypatch, tmp_path):
    """npm --silent prints nothing when a postinstall fails: the error names what crush's needs."""
    from openforge.core.errors import HarnessError

    bindir = tmp_path / "bin"
    bindir.mkdir()
    npm = bindir / "npm"
    npm.write_text("#!/bin/sh\nexit 1\n")  # npm as a failed postinstall leaves it: exit 1, nothing printed
    npm.chmod(0o755)
    monkeypatch.setattr(installer.shutil, "which", lambda name: str(npm) if name == "npm" else None)
    monkeypatch.setattr(installer, "path_dirs", lambda name, cache=None: [])
    with pytest.raises(HarnessError, match=r"npm install @charmland/crush@.*github\.com/charmbracelet"):
        installer.install("crush", tmp_path / "cache")
    with pytest.raises(HarnessError) as e:  # a pin without a note keeps the plain message
        installer.install("opencode", tmp_path / "cache")
    assert "github" not in str(e.value) and "npm install opencode-ai@" in str(e.value)
