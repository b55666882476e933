"""Config generation and lookup of the PyPI command-line harnesses (aider, mini-swe-agent,
hermes-agent): each points its CLI at the rollout's proxy with the rollout secret, switches off
outside traffic and approvals, finds its venv executable, and reads its final answer back."""

from __future__ import annotations

import json

import pytest
import yaml
from harness_helpers import OA

from openforge.core.errors import ConfigError, HarnessNotInstalled
from openforge.harnesses import installer
from openforge.harnesses.aider import AiderHarness, last_llm_response
from openforge.harnesses.hermes_agent import HermesAgentHarness
from openforge.harnesses.mini_swe_agent import MiniSweAgentHarness, submission
from openforge.harnesses.pypi_cli import venv_base_prefix
from openforge.harnesses.versions import PYPI_EXECUTABLES, PYPI_PINS
from openforge.plugins import harness_class


def test_registered_and_pinned():
    for name, cls in (("aider", AiderHarness), ("mini-swe-agent", MiniSweAgentHarness),
                      ("hermes-agent", HermesAgentHarness)):
        assert harness_class(name) is cls and cls.wire_api == "chat"
        assert "==" in PYPI_PINS[name] and PYPI_EXECUTABLES[name] == cls.executable
        assert PYPI_PINS[name] in cls.install_hint


def test_mini_config_argv_env(ctx):
    h = MiniSweAgentHarness()
    cfg = yaml.safe_load(h.config_files(ctx)[".openforge-mini.yaml"])
    assert cfg["model"]["model_name"] == "openai/pol"
    assert cfg["model"]["model_kwargs"]["api_base"] == OA and cfg["model"]["model_kwargs"]["api_key"] == "sk-roll"
    assert cfg["agent"]["mode"] == "yolo" and cfg["agent"]["confirm_exit"] is False and cfg["agent"]["cost_limit"] == 0
    assert cfg["environment"]["cwd"] == str(ctx.workdir)
    env = h.environment(ctx)
    assert env["MSWEA_CONFIGURED"] == "true" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["MSWEA_GLOBAL_CONFIG_DIR"].startswith(str(ctx.home))
    argv = h.command(ctx, "mini")
    assert argv[:3] == ["mini", "-y", "--exit-immediately"] and argv[-2:] == ["-t", "write hi to out.txt"]
    assert argv[argv.index("-c", 4) + 1] == str(ctx.home / ".openforge-mini.yaml")


def test_mini_submission_parsing():
    assert submission(json.dumps({"info": {"submission": "Done.\n"}}).encode()) == "Done."
    assert submission(json.dumps({"info": {"submission": ""}}).encode()) is None
    assert submission(b"not json") is None and submission(b"[]") is None


def test_aider_argv_env_files(ctx):
    h = AiderHarness()
    files = h.config_files(ctx)
    meta = json.loads(files[".aider.model.metadata.json"])["openai/pol"]
    assert meta["input_cost_per_token"] == 0 and meta["litellm_provider"] == "openai"
    assert files[".aider/caches/model_prices_and_context_window.json"] == "{}"  # no price-list download
    argv = h.command(ctx, "aider")
    assert argv[argv.index("--model") + 1] == "openai/pol" and argv[argv.index("--openai-api-base") + 1] == OA
    for flag in ("--no-git", "--analytics-disable", "--no-check-update", "--no-fancy-input", "--no-pretty"):
        assert flag in argv
    assert "--yes-always" not in argv  # it would decline every shell command
    assert argv[-2:] == ["--message", "write hi to out.txt"]
    assert h.environment(ctx)["OPENAI_API_KEY"] == "sk-roll"


def test_aider_last_llm_response():
    log = ("TO LLM 2026-12-05T10:00:00\n-------\nSYSTEM hi\nLLM RESPONSE 2026-12-05T10:00:01\n"
           "ASSISTANT first\nTO LLM 2026-12-05T10:00:02\n-------\nUSER fix\n"
           "LLM RESPONSE 2026-12-05T10:00:03\nASSISTANT line one\nASSISTANT\nASSISTANT Done.\n")
    assert last_llm_response(log) == "line one\n\nDone."
    assert last_llm_response("LLM RESPONSE t\nASSISTANT only\n") == "only"
    assert last_llm_response("TO LLM t\nSYSTEM x\n") is None and last_llm_response("") is None


def test_hermes_config_argv_env(ctx):
    h = HermesAgentHarness()
    cfg = yaml.safe_load(h.config_files(ctx)[".hermes/config.yaml"])["model"]
    assert cfg == {"provider": "custom", "default": "pol", "base_url": OA, "api_key": "sk-roll",
                   "api_mode": "chat_completions"}
    env = h.environment(ctx)
    assert env["HERMES_HOME"] == str(ctx.home / ".hermes")
    argv = h.command(ctx, "hermes")
    assert argv[argv.index("--provider") + 1] == "custom" and argv[argv.index("-m") + 1] == "pol"
    assert "--yolo" in argv and argv[-2:] == ["--oneshot", "write hi to out.txt"]
    with pytest.raises(ConfigError, match="wire_api must be one of chat"):
        HermesAgentHarness(wire_api="gemini")


def test_venv_executable_lookup_and_ro_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path))
    monkeypatch.delenv("OPENFORGE_MINI_SWE_AGENT_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    h = MiniSweAgentHarness()
    with pytest.raises(HarnessNotInstalled, match="forge harness install mini-swe-agent"):
        h.check_installed()
    venv = tmp_path / "mini-swe-agent" / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "mini"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    base = tmp_path / "py" / "bin"
    base.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base}\nversion = 3.11.7\n")
    site = venv / "lib" / "python3.11" / "site-packages" / "mini_swe_agent-2.4.6.dist-info"
    site.mkdir(parents=True)
    assert installer.find_executable("mini-swe-agent") == exe
    assert installer.installed_version("mini-swe-agent") == "2.4.6"
    h.check_installed()
    assert h.resolve_executable() == str(exe) and h.node_path_dirs() == []
    assert venv_base_prefix(venv) == str(base.parent)
    assert set(h.ro_paths()) == {str(venv), str(base.parent)}
