"""Recipes and the ``forge recipe`` / ``forge export`` commands (no model runs here)."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.recipes import copy_recipe, list_recipes, load_recipe_config

runner = CliRunner()


def test_every_recipe_and_preset_validates():
    names = list_recipes()
    assert {"claw-grpo", "claw-sft", "gui-grpo"} <= set(names)
    for name, path in names.items():
        presets = yaml.safe_load((path / "config.yaml").read_text())["presets"]
        for preset in [None, *presets]:
            cfg = load_recipe_config(name, preset=preset)
            assert cfg.recipe == name
    cpu = load_recipe_config("claw-grpo")  # default preset: cpu
    assert cpu.trainer.backend == "cpu" and cpu.sft.enabled and cpu.rollout.group_size >= 4
    assert cpu.model.name == "smollm2-135m" and cpu.harness.name == "react" and cpu.env.split == "train"
    assert load_recipe_config("claw-grpo", preset="verl").trainer.backend == "verl"


def test_recipe_list_show_cp(tmp_path):
    r = runner.invoke(app, ["recipe", "list"])
    assert r.exit_code == 0 and "claw-grpo" in r.output and "gui-grpo" in r.output
    r = runner.invoke(app, ["recipe", "show", "claw-grpo", "rollout.group_size=6"])
    assert r.exit_code == 0 and "group_size: 6" in r.output
    r = runner.invoke(app, ["recipe", "cp", "claw-grpo", str(tmp_path / "mine")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "mine" / "config.yaml").is_file() and (tmp_path / "mine" / "README.md").is_file()
    # a copied folder runs like a recipe
    assert load_recipe_config(str(tmp_path / "mine")).recipe == "claw-grpo"
    try:
        copy_recipe("claw-grpo", tmp_path / "mine")  # now non-empty: goes to mine/claw_grpo
    except Exception as e:  # pragma: no cover
        raise AssertionError(e) from e
    assert (tmp_path / "mine" / "claw_grpo" / "config.yaml").is_file()


def test_recipe_dry_run_and_verl_command():
    r = runner.invoke(app, ["recipe", "claw-grpo", "--preset", "verl", "--dry-run", "trainer.steps=3"])
    assert r.exit_code == 0, r.output
    assert "python -m verl.trainer.main_ppo" in r.output
    assert "actor_rollout_ref.rollout.n=8" in r.output and "trainer.total_training_steps=3" in r.output


def test_recipe_reports_every_problem_at_once():
    import subprocess
    import sys

    from openforge.cli.main import main

    p = subprocess.run([sys.executable, "-c", "from openforge.cli.main import main; main()", "recipe", "claw-grpo",
                        "rollout.group_size=1", "bogus=2", "stray", "--preset", "nope"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    for needle in ("'stray': expected key.path=value", "rollout.group_size", "bogus: unknown key", "preset 'nope'"):
        assert needle in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert main  # imported for the console-script path


def test_unknown_recipe_suggests():
    r = runner.invoke(app, ["recipe", "show", "claw-grop"])
    assert r.exit_code != 0
    assert "claw-grpo" in str(r.exception)


def test_root_recipe_copies_match_the_shipped_ones():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "recipes"
    if not root.is_dir():  # an installed wheel without the repository around it
        import pytest

        pytest.skip("no repository recipes/ folder")
    for path in list_recipes().values():
        for f in ("config.yaml", "README.md"):
            copy = root / path.name / f
            assert copy.is_file(), f"recipes/{path.name}/{f} missing: cp {path / f} {copy}"
            assert copy.read_text() == (path / f).read_text(), f"recipes/{path.name}/{f} differs from {path / f}"
