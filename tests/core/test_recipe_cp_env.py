"""``forge recipe cp`` for another environment (issue 26, item 4): a copy with ``env.name=ENV`` drops
the claw-only settings ENV lacks (the easy subset, the held-out split, the reference-solution warm-start)
and says so; every preset of the copy then passes the dry run's task checks. A plain copy says which
settings are claw's."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.core.errors import ConfigError
from openforge.recipes import load_recipe_config

runner = CliRunner()


def _tasks(root: Path) -> Path:
    for tid in ("a", "b"):
        d = root / "tasks" / tid
        d.mkdir(parents=True)
        (d / "task.toml").write_text(f'id = "{tid}"\nsplit = "train"\nexit_code_reward = true\n')
        (d / "instruction.md").write_text("x")
        (d / "verify.sh").write_text("#!/bin/sh\nexit 0\n")
        os.chmod(d / "verify.sh", 0o755)
    return root / "tasks"


def test_cp_for_another_environment_drops_what_it_lacks(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path)
    res = runner.invoke(app, ["recipe", "cp", "claw-grpo", str(tmp_path / "mine"), f"env.name={tasks}"])
    assert res.exit_code == 0, (res.output, res.exception)  # before: "forge recipe cp NAME DIR"
    out = " ".join(res.output.split())
    assert "dropped presets.cpu.env.subset=easy" in out and "no train task of 'tasks' is in it" in out
    assert "dropped presets.cpu.eval.heldout=split heldout (held-out evaluation off)" in out
    assert "dropped presets.cpu.sft.teacher=reference (SFT warm-start off)" in out
    data = yaml.safe_load((tmp_path / "mine" / "config.yaml").read_text())
    assert data["env"]["name"] == str(tasks)
    assert data["presets"]["faults"]["env"]["options"]["faults"]["fraction"] == 0.5  # a task folder takes faults
    from openforge.runner.preflight import _tasks as check_tasks
    from openforge.runner.session import load_environment

    env = load_environment(str(tasks))
    for preset in data["presets"]:
        cfg = load_recipe_config(str(tmp_path / "mine"), preset=preset)
        assert cfg.env.subset is None and not cfg.eval.heldout.enabled, preset
        if cfg.trainer.backend == "cpu":
            assert "2 task(s)" in check_tasks(cfg, env)  # the dry run's task check passes


def test_plain_cp_says_which_settings_are_the_environments(tmp_path: Path) -> None:
    res = runner.invoke(app, ["recipe", "cp", "claw-grpo", str(tmp_path / "mine")])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "written for the 'claw' environment" in out and "presets.cpu.env.subset=easy" in out
    assert "env.name=ENV" in out
    bad = runner.invoke(app, ["recipe", "cp", "claw-grpo", str(tmp_path / "x"), "trainer.steps=3"])
    assert isinstance(bad.exception, ConfigError) and not (tmp_path / "x").exists()
