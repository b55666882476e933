"""Config generation of the kilocode and continue adapters: each points its CLI at the rollout's
proxy with the rollout secret, on Chat Completions, with outside traffic off and tool calls approved;
and each reads its final answer out of the CLI's own output format."""

from __future__ import annotations

import json

import pytest
from harness_helpers import OA

from openforge.harnesses import installer
from openforge.harnesses.continue_cli import ContinueHarness
from openforge.harnesses.kilocode import KilocodeHarness
from openforge.harnesses.versions import NPM_PINS
from openforge.plugins import harness_class


def test_kilocode_config_env_argv_and_final_text(ctx):
    h = KilocodeHarness()
    cfg = json.loads(h.config_files(ctx)[".config/kilo/kilo.json"])
    prov = cfg["provider"]["openforge"]
    assert prov["npm"] == "@ai-sdk/openai-compatible" and prov["options"] == {"baseURL": OA, "apiKey": "sk-roll"}
    assert list(prov["models"]) == ["pol"] and cfg["model"] == cfg["small_model"] == "openforge/pol"
    assert cfg["enabled_providers"] == ["openforge"] and cfg["permission"]["bash"] == "allow"
    assert cfg["autoupdate"] is False and cfg["share"] == "disabled"
    env = h.environment(ctx)
    assert env["KILO_CONFIG"] == str(ctx.home / ".config/kilo/kilo.json")
    for key in ("KILO_DISABLE_MODELS_FETCH", "KILO_DISABLE_AUTOUPDATE", "KILO_DISABLE_SESSION_INGEST",
                "KILO_NO_DAEMON"):
        assert env[key] == "1", key
    argv = h.command(ctx, "/x/kilo")
    assert argv[:2] == ["/x/kilo", "run"] and "--auto" in argv and argv[-1] == ctx.instruction
    assert argv[argv.index("-m") + 1] == "openforge/pol" and argv[argv.index("--dir") + 1] == str(ctx.workdir)
    out = "\n".join([json.dumps({"type": "text", "part": {"text": "first"}}),
                     json.dumps({"type": "tool_use", "part": {"tool": "bash"}}),
                     json.dumps({"type": "text", "part": {"text": "Done."}}), "noise"])
    assert h.final_text(out) == "Done."


def test_continue_config_env_argv_and_final_text(ctx):
    h = ContinueHarness()
    cfg = json.loads(h.config_files(ctx)[".continue/config.yaml"])  # JSON is YAML
    (model,) = cfg["models"]
    assert model["provider"] == "openai" and model["apiBase"] == OA and model["apiKey"] == "sk-roll"
    assert model["model"] == "pol" and "chat" in model["roles"] and cfg["schema"] == "v1"
    env = h.environment(ctx)
    assert env["CONTINUE_GLOBAL_DIR"] == str(ctx.home / ".continue")
    assert env["CONTINUE_CLI_ENABLE_TELEMETRY"] == "0" and env["CONTINUE_METRICS_ENABLED"] == "0"
    argv = h.command(ctx, "/x/cn")
    assert argv[:3] == ["/x/cn", "-p", "--auto"] and argv[-1] == ctx.instruction
    assert argv[argv.index("--config") + 1] == str(ctx.home / ".continue/config.yaml")
    assert h.final_text("\n  Done: wrote out.txt.\n") == "Done: wrote out.txt." and h.final_text("  \n") is None


@pytest.mark.parametrize(("name", "package", "exe"), [("kilocode", "@kilocode/cli", "kilo"),
                                                      ("continue", "@continuedev/cli", "cn")])
def test_registered_pinned_and_found_in_the_cache(tmp_path, name, package, exe):
    pin = NPM_PINS[name]
    assert pin.package == package and pin.executable == exe and pin.version.count(".") == 2
    assert harness_class(name).executable == exe and harness_class(name).wire_api == "chat"
    assert installer.find_executable(name, tmp_path) is None
    bin_ = tmp_path / name / "node_modules" / ".bin" / exe
    bin_.parent.mkdir(parents=True)
    bin_.write_text("#!/bin/sh\n")
    pkg = tmp_path / name / "node_modules" / package / "package.json"
    pkg.parent.mkdir(parents=True)
    pkg.write_text(json.dumps({"version": pin.version}))
    assert installer.find_executable(name, tmp_path) == bin_ and installer.installed_version(name, tmp_path) == pin.version


def test_an_unsupported_cli_is_listed_with_why_and_refused_by_name():
    """cline is pinned but cannot be trained through yet: `forge harness list` says so and why, and
    naming it as a harness gives that reason, not "unknown harness"."""
    import json

    from typer.testing import CliRunner

    from openforge.cli.main import app
    from openforge.core.errors import PluginNotFound
    from openforge.harnesses.versions import UNSUPPORTED
    from openforge.plugins import harness_class

    rows = json.loads(CliRunner().invoke(app, ["harness", "list", "--json"]).output)
    cline = next(r for r in rows if r["name"] == "cline")
    assert cline["installed"] is False and "local base URL" in cline["unsupported"]
    with pytest.raises(PluginNotFound, match=r"not supported yet: .*local base URL"):
        harness_class("cline")
    assert "cline" in UNSUPPORTED
