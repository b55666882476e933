"""`forge harness list|install` and the installer's cache layout (no registry is contacted here:
installs are exercised by scripts/test.sh; these tests cover lookup, idempotence and errors)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.core.errors import ConfigError, HarnessNotInstalled
from openforge.harnesses import installer
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.versions import NPM_PINS


def _fake_install(cache, name, version):
    pin = NPM_PINS[name]
    pkg = cache / name / "node_modules" / pin.package
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": pin.package, "version": version}))
    exe = cache / name / "node_modules" / ".bin" / pin.executable
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\necho fake\n")
    exe.chmod(0o755)
    return exe


def test_installed_pinned_version_is_found_and_install_is_idempotent(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path))
    exe = _fake_install(tmp_path, "codex", NPM_PINS["codex"].version)
    assert installer.find_executable("codex") == exe
    assert installer.installed_version("codex") == NPM_PINS["codex"].version
    monkeypatch.delenv("OPENFORGE_CODEX_BIN", raising=False)
    assert CodexHarness().resolve_executable() == str(exe)
    assert "already installed" in installer.install("codex")  # no npm run: nothing to do
    assert CodexHarness().describe()["installed"] is True


def test_install_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="don't know how to install harness 'nope'"):
        installer.install("nope")
    with pytest.raises(HarnessNotInstalled, match="ZEROCLAW_BIN"):
        installer.install("zeroclaw")
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on PATH
    with pytest.raises(HarnessNotInstalled, match="npm is not on PATH"):
        installer.install("claude-code")


def test_path_dirs_for_node(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path))
    monkeypatch.setattr(installer, "system_node_version", lambda: (20, 20))
    assert installer.path_dirs("codex") == []
    assert installer.path_dirs("openclaw") is None  # needs Node >= 24.16, none in the cache
    nb = installer.node_bin_dir()
    nb.mkdir(parents=True)
    (nb / "node").write_text("")
    assert installer.path_dirs("openclaw") == [str(nb)]


def test_forge_harness_list_and_install(tmp_path, monkeypatch):
    runner = CliRunner()
    monkeypatch.setenv("COLUMNS", "250")
    res = runner.invoke(app, ["harness", "list"])
    assert res.exit_code == 0, res.output
    for name in ("react", "codex", "claude-code", "openclaw", "zeroclaw", "pi", "browser-use", "computer-use"):
        assert name in res.output
    assert "responses" in res.output and "messages" in res.output
    res = runner.invoke(app, ["harness", "install", "react"])
    assert res.exit_code == 0 and "built in" in res.output
    _fake_install(tmp_path, "pi", NPM_PINS["pi"].version)
    res = runner.invoke(app, ["harness", "install", "pi", "--cache-dir", str(tmp_path)])
    assert res.exit_code == 0 and "already installed" in res.output, res.output
    assert os.environ.get("OPENFORGE_HARNESS_DIR") != str(tmp_path)
