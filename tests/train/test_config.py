"""Run configuration: YAML + presets + key=value overrides, every error at once."""

from __future__ import annotations

import pytest
import yaml

from openforge.config import RunConfig, dump_config, load_config, parse_overrides
from openforge.core.errors import ConfigError


def test_overrides_parse_yaml_values():
    ov, problems = parse_overrides(["a.b=3", "a.c=[x, y]", "d=true", "e=0.5", "f=hello world"])
    assert problems == []
    assert ov == {"a": {"b": 3, "c": ["x", "y"]}, "d": True, "e": 0.5, "f": "hello world"}
    _, problems = parse_overrides(["novalue", "=3", "a..b=1"])
    assert len(problems) == 3


def test_yaml_preset_and_overrides(tmp_path):
    src = tmp_path / "c.yaml"
    src.write_text(yaml.safe_dump({
        "recipe": "demo", "rollout": {"group_size": 4},
        "presets": {"cpu": {"trainer": {"steps": 3}}, "verl": {"trainer": {"backend": "verl"}}},
    }))
    cfg = load_config(src, preset="cpu", overrides=["rollout.group_size=6", "trainer.cpu.lr=1e-4"])
    assert (cfg.recipe, cfg.rollout.group_size, cfg.trainer.steps, cfg.trainer.cpu.lr) == ("demo", 6, 3, 1e-4)
    assert load_config(src, preset="verl").trainer.backend == "verl"
    out = dump_config(cfg, tmp_path / "run" / "config.yaml")
    assert load_config(out) == cfg  # the dumped config reproduces the run


def test_a_removed_key_says_it_was_removed():
    """``trainer.verl.tool_parser`` did nothing and is gone: a config that still sets it is told so
    (not a bare "unknown key"), and the shipped recipes no longer set it."""
    with pytest.raises(ConfigError) as ei:
        load_config({"trainer": {"backend": "verl", "verl": {"tool_parser": "hermes"}}})
    (problem,) = [p for p in ei.value.problems if p.startswith("trainer.verl.tool_parser")]
    assert "removed" in problem and "delete the key" in problem
    from openforge.recipes import load_recipe_config

    load_recipe_config("claw-grpo", preset="verl")


def test_every_error_at_once():
    with pytest.raises(ConfigError) as ei:
        load_config({"rollout": {"group_size": 1, "bogus": 2}}, preset="nope",
                    overrides=["trainer.cpu.lr=-1", "oops", "env.max_tasks=abc"])
    problems = ei.value.problems
    assert any("preset 'nope'" in p for p in problems)
    assert any(p.startswith("'oops'") for p in problems)
    assert any(p.startswith("rollout.bogus: unknown key") for p in problems)
    assert any(p.startswith("rollout.group_size:") for p in problems)
    assert any(p.startswith("trainer.cpu.lr:") for p in problems)
    assert any(p.startswith("env.max_tasks:") for p in problems)


def test_trainer_follows_sampling_temperature():
    cfg = load_config({}, overrides=["rollout.temperature=0.7"])
    assert cfg.trainer.cpu.temperature == 0.7
    with pytest.raises(ConfigError, match=r"must equal rollout\.temperature"):
        load_config({}, overrides=["rollout.temperature=0.7", "trainer.cpu.temperature=1.0"])


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")
    assert isinstance(load_config(RunConfig()), RunConfig)
