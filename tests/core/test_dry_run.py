"""``--dry-run`` and ``openforge.run(..., dry_run=True)`` check what a real run would refuse (issue 26,
item 3), before a run directory or a weight exists: environment options, task selection, model and
tokenizer, harness, sandbox. A real run makes the same checks first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import openforge
from openforge.cli.main import app
from openforge.core.errors import ConfigError, SandboxError

runner = CliRunner()


def test_dry_run_refuses_a_subset_and_a_model_the_run_would_refuse(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = runner.invoke(app, ["recipe", "claw-grpo", "--dry-run", "env.subset=nosuch",
                              f"model.name={tmp_path / 'no-model'}", f"run_dir={run_dir}"])
    assert isinstance(res.exception, ConfigError), (res.output, res.exception)  # before: exit 0
    problems = res.exception.problems
    assert "tasks: env.subset='nosuch': no train task of 'claw' is in it" in problems
    assert any(p.startswith(f"model: model.name='{tmp_path / 'no-model'}': no such model directory") for p in problems)
    assert not run_dir.exists()


def test_dry_run_names_a_bad_environment_option_and_an_incomplete_model_dir(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError) as info:
        openforge.run(recipe="claw-grpo", dry_run=True, overrides=["env.options.bogus=1", f"model.name={model}"])
    problems = info.value.problems
    assert any(p.startswith("environment: env.options:") and "bogus" in p for p in problems), problems
    assert any("model:" in p and "missing tokenizer files" in p for p in problems), problems


def test_dry_run_in_python_returns_the_checks_and_creates_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = openforge.run(recipe="claw-grpo", preset="test", dry_run=True, overrides=[f"run_dir={run_dir}"])
    assert out["dry_run"] is True and out["config"]["run_dir"] == str(run_dir)
    checks = {c.split(":")[0] for c in out["checks"]}
    assert checks == {"ok environment", "ok tasks", "ok model", "ok prompt", "ok harness", "ok sandbox"}
    assert any("weights not loaded" in c for c in out["checks"])
    assert not run_dir.exists()


def test_dry_run_checks_that_the_sandbox_starts(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="unknown isolation 'bogus'"):
        openforge.run(recipe="claw-grpo", dry_run=True, overrides=["launcher.options.isolation=bogus"])


def test_a_real_run_refuses_a_bad_subset_before_the_run_dir_and_the_model_load(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    t = time.monotonic()
    with pytest.raises(ConfigError, match=r"env\.subset='nosuch'"):
        openforge.run(recipe="claw-grpo", preset="test", overrides=["env.subset=nosuch", f"run_dir={run_dir}"],
                      progress=False)
    assert not run_dir.exists()  # before: created, then the model loaded (17-28 s), then the error
    assert time.monotonic() - t < 15
