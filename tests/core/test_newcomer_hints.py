"""Hints in a newcomer's own terms (issue 38, item 5): a mistyped config key names the key it is close
to; a ``module:Class`` whose module does not import says where the module is and the PYTHONPATH that
finds it (a ``forge`` command does not import from the current folder); a mistyped class name names
the classes it is close to."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.config import load_config
from openforge.core.errors import ConfigError, PluginUnavailable
from openforge.plugins import HARNESSES, import_hint
from openforge.recipes import load_recipe_config


@pytest.mark.parametrize("override, hint", [
    ("rollout.grop_size=3", "rollout.grop_size: unknown key (did you mean rollout.group_size?)"),
    ("trainer.cpu.lrr=1", "trainer.cpu.lrr: unknown key (did you mean trainer.cpu.lr?)"),
    ("env.nmae=x", "env.nmae: unknown key (did you mean env.name?)"),
    ("seeed=1", "seeed: unknown key (did you mean seed?)"),
])
def test_a_mistyped_key_names_the_key_it_is_close_to(override, hint):
    with pytest.raises(ConfigError) as info:
        load_config({}, overrides=[override])
    assert hint in info.value.problems


def test_a_key_close_to_nothing_lists_its_sections_keys():
    with pytest.raises(ConfigError) as info:
        load_recipe_config("claw-grpo", preset="test", overrides=["rollout.zzzzzzzz=1"])
    (problem,) = info.value.problems
    assert problem.startswith("rollout.zzzzzzzz: unknown key (the keys of rollout: group_size, tasks_per_step")


@pytest.fixture(autouse=True)
def _forget_my_agents():
    yield
    for mod in [m for m in sys.modules if m == "my_agents" or m.startswith("my_agents.")]:
        del sys.modules[mod]


def _project(root: Path) -> Path:
    pkg = root / "src" / "my_agents"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "harness.py").write_text("from openforge.harnesses.react import ReactHarness\n\n\n"
                                    "class MyReact(ReactHarness):\n    name = 'mine'\n")
    return pkg


def test_a_module_class_that_does_not_import_says_where_the_module_is(tmp_path, monkeypatch):
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PluginUnavailable) as info:
        HARNESSES.get("my_agents.harness:MyReact")
    msg = str(info.value)
    assert "No module named 'my_agents'" in msg
    assert "`my_agents` is in ./src, where Python does not look: run with PYTHONPATH=src" in msg


def test_the_hint_when_the_module_is_nowhere_near(tmp_path):
    assert "neither on sys.path nor installed: put the folder that holds it on PYTHONPATH" in import_hint(
        "nowhere_pkg.mod", tmp_path)
    (tmp_path / "nowhere_pkg.py").write_text("")
    assert "is in this folder" in import_hint("nowhere_pkg", tmp_path) and "PYTHONPATH=." in import_hint(
        "nowhere_pkg", tmp_path)


def test_the_cli_shows_the_hint_and_with_pythonpath_it_imports(tmp_path, monkeypatch):
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["rollout", "-H", "my_agents.harness:MyReact", "--task", "files-create-hello",
                                   "--backend", "reference", "--out", str(tmp_path / "out")])
    assert res.exit_code != 0
    assert "PYTHONPATH=src" in " ".join(str(res.exception).split()), (res.output, res.exception)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    assert HARNESSES.get("my_agents.harness:MyReact").name == "mine"


def test_a_mistyped_class_name_names_the_close_ones(tmp_path, monkeypatch):
    _project(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    with pytest.raises(PluginUnavailable, match=r"did you mean my_agents\.harness:MyReact\?"):
        HARNESSES.get("my_agents.harness:MyRaect")
