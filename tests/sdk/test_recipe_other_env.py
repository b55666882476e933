"""A shipped recipe run for a custom environment (issue 38, item 5): ``claw-grpo --preset test
env.name=my_env:Env`` drops claw's settings the environment cannot honour (the ``easy`` subset, the
held-out split) and says so, instead of refusing the run with "env.subset='easy': no train task of
... is in it". Claw's own presets are unchanged, and a setting the user gives still wins."""

from __future__ import annotations

import textwrap
import warnings

import pytest
from typer.testing import CliRunner

import openforge
from openforge.cli.main import app
from openforge.config import load_config
from openforge.recipes import RecipeFitWarning, load_recipe_config, recipe_config

ENV_SRC = '''
from openforge import Environment, Task, VerifyResult


class Plain(Environment):
    """Three train tasks in the default category, no held-out split: nothing claw-shaped."""

    name = "plain"

    def tasks(self, split=None):
        out = [Task(id=f"t{i}", instruction=f"write {i} to answer.txt", environment=self.name,
                    metadata={"solution": [f"echo {i} > answer.txt"]}) for i in range(3)]
        return [t for t in out if split is None or t.split == split]

    async def verify(self, task, sandbox):
        want = task.id[1:]
        return VerifyResult.from_checks({"answer": (await sandbox.read_file("answer.txt")).strip() == want.encode()})
'''
ENV = "newcomer_plain_env:Plain"


@pytest.fixture
def plain_env(tmp_path, monkeypatch):
    (tmp_path / "newcomer_plain_env.py").write_text(textwrap.dedent(ENV_SRC))
    monkeypatch.syspath_prepend(str(tmp_path))
    return ENV


@pytest.mark.parametrize("preset", ["test", "cpu"])
def test_a_preset_drops_the_claw_settings_a_custom_environment_lacks(plain_env, preset):
    notes: list[str] = []
    cfg = load_recipe_config("claw-grpo", preset=preset, overrides=[f"env.name={plain_env}"], notes=notes)
    assert cfg.env.name == plain_env and cfg.env.subset is None  # before: ConfigError at the run's task check
    text = "\n".join(notes)
    assert f"dropped presets.{preset}.env.subset=easy" in text and "no train task of 'plain' is in it" in text
    assert cfg.sft.enabled and cfg.sft.teacher == "reference"  # its tasks have reference solutions: kept
    if preset == "cpu":
        assert not cfg.eval.heldout.enabled and "held-out evaluation off" in text
    assert "is written for 'claw'" in text


def test_the_python_api_runs_the_test_preset_checks_for_a_custom_environment(plain_env, tmp_path):
    with pytest.warns(RecipeFitWarning, match="env.subset=easy"):
        out = openforge.run(recipe="claw-grpo", preset="test", dry_run=True,
                            overrides=[f"env.name={plain_env}", f"run_dir={tmp_path / 'run'}"])
    assert any(c.startswith("ok tasks") for c in out["checks"]), out["checks"]
    assert out["config"]["env"]["subset"] is None


def test_the_cli_says_what_it_dropped_and_the_dry_run_passes(plain_env, tmp_path):
    res = CliRunner().invoke(app, ["recipe", "claw-grpo", "--preset", "test", "--dry-run",
                                   f"env.name={plain_env}", f"run_dir={tmp_path / 'run'}"])
    assert res.exit_code == 0, (res.output, res.exception)
    out = " ".join(res.output.split())
    assert "dropped presets.test.env.subset=easy" in out and "ok tasks" in out


def test_a_setting_the_user_gives_still_wins(plain_env):
    cfg = load_recipe_config("claw-grpo", preset="test", overrides=[f"env.name={plain_env}", "env.subset=general"],
                             notes=[])
    assert cfg.env.subset == "general"


@pytest.mark.parametrize("preset", list(recipe_config("claw-grpo")["presets"]))
def test_claw_presets_are_unchanged(preset):
    data = recipe_config("claw-grpo")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecipeFitWarning)
        for overrides in ([], ["env.name=claw"]):
            got = load_recipe_config("claw-grpo", preset=preset, overrides=overrides)
            assert got == load_config(data, preset=preset, overrides=overrides), preset
