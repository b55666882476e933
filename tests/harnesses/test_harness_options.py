"""Any harness from a recipe: options checked against the chosen harness at config validation,
per-harness option blocks, and the refusal of a harness whose prompt cannot fit the context."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.config import load_config
from openforge.core.errors import ConfigError
from openforge.harnesses.options import harness_options
from openforge.harnesses.pi import PiHarness
from openforge.harnesses.prompt_fit import MEASURED_PROMPT_TOKENS, check_prompt_fits, prompt_tokens
from openforge.harnesses.react import ReactHarness
from openforge.recipes import load_recipe_config

PI_OPTIONS = "binary, env, extra_args, wire_api"


def problems(*overrides: str, preset: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_recipe_config("claw-grpo", preset=preset, overrides=list(overrides))
    return e.value.problems


def test_options_come_from_the_constructor_chain():
    assert ", ".join(sorted(harness_options(PiHarness) or {})) == PI_OPTIONS
    react = harness_options(ReactHarness) or {}
    assert {"max_turns", "max_tokens", "max_output", "python", "binary", "extra_args", "env"} == set(react)


@pytest.mark.parametrize("preset", [None, "test", "verl"])
def test_recipe_runs_pi_with_pis_own_block(preset):
    cfg = load_recipe_config("claw-grpo", preset=preset, overrides=["harness.name=pi"])
    assert cfg.harness.name == "pi" and cfg.harness.options == {}  # react's max_turns etc. stay with react
    react = load_recipe_config("claw-grpo", preset=preset)
    assert react.harness.options["max_turns"] == {None: 4, "test": 2, "verl": 16}[preset]


def test_a_foreign_option_is_reported_with_every_other_problem():
    got = problems("harness.name=pi", "harness.options.max_turns=3", "harness.options.wire_api=7",
                   "rollout.group_size=1")
    assert f"harness.options.max_turns: not an option of pi; options: {PI_OPTIONS}" in got
    assert any(p.startswith("harness.options.wire_api: Input should be a valid string") for p in got)
    assert any(p.startswith("rollout.group_size:") for p in got)


def test_mistyped_option_unknown_harness_and_other_blocks_are_checked():
    assert any(p.startswith("harness.options.max_turns: Input should be a valid integer")
               for p in problems("harness.per_harness.react.max_turns=lots"))
    assert any(p.startswith("harness.name: unknown harness 'nope'") for p in problems("harness.name=nope"))
    # a block of a harness not chosen now is still checked against its own harness
    assert problems("harness.per_harness.pi.max_turns=2") == [
        f"harness.per_harness.pi.max_turns: not an option of pi; options: {PI_OPTIONS}"]


def test_an_option_set_both_ways_is_an_error_not_a_silent_override():
    got = problems("harness.options.max_turns=6")
    assert any("options.max_turns=6 clashes with per_harness.react.max_turns=4" in p
               and "set harness.per_harness.react.max_turns" in p for p in got), got
    assert load_recipe_config("claw-grpo", overrides=["harness.per_harness.react.max_turns=6"]).harness.options[
        "max_turns"] == 6


def test_resolved_config_records_only_the_merged_options():
    cfg = load_recipe_config("claw-grpo")
    dumped = cfg.model_dump(mode="json")
    assert "per_harness" not in dumped["harness"]
    assert dumped["harness"]["options"] == {"max_turns": 4, "max_tokens": 160, "max_output": 1200}
    assert load_config(yaml.safe_load(yaml.safe_dump(dumped))).model_dump(mode="json") == dumped


@pytest.mark.parametrize("harness", ["codex", "openclaw", "claude-code"])
def test_a_prompt_that_cannot_fit_the_cpu_model_is_refused_with_its_size(harness):
    cfg = load_recipe_config("claw-grpo", overrides=[f"harness.name={harness}"])
    with pytest.raises(ConfigError) as e:
        check_prompt_fits(cfg)
    size = next(n for (h, _), n in MEASURED_PROMPT_TOKENS.items() if h == harness)
    assert f"{harness}'s prompt is ~{size} tokens" in str(e.value) and "8192-token context" in str(e.value)
    # the veRL preset's 32k context holds all of them
    assert check_prompt_fits(load_recipe_config("claw-grpo", preset="verl", overrides=[f"harness.name={harness}"]))


def test_pi_fits_and_react_is_measured_with_the_policy_tokenizer():
    assert check_prompt_fits(load_recipe_config("claw-grpo", overrides=["harness.name=pi"])).tokens == 1500
    react = prompt_tokens("react", "smollm2-135m")
    assert react is not None and "rendered with smollm2-135m's tokenizer" in react.how
    assert 200 < react.tokens < 1000  # system prompt + four tools
    # a max_tokens that leaves no room for react's prompt is refused too
    with pytest.raises(ConfigError, match=f"react's prompt is ~{react.tokens} tokens"):
        check_prompt_fits(load_recipe_config("claw-grpo", overrides=["rollout.max_tokens=8000"]))


def test_recipe_cli_dry_run_with_pi_and_a_refused_codex():
    r = CliRunner().invoke(app, ["recipe", "claw-grpo", "harness.name=pi", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(r.output)["harness"] == {"name": "pi", "options": {}}
    assert "pi's prompt: ~1500 tokens" in r.output
    r = CliRunner().invoke(app, ["recipe", "claw-grpo", "harness.name=codex", "--dry-run"])
    assert r.exit_code != 0 and isinstance(r.exception, ConfigError) and "9200" in str(r.exception)


def test_a_harness_that_is_not_installed_is_refused_before_the_run_starts(tmp_path):
    import asyncio

    from openforge.core.errors import HarnessNotInstalled
    from openforge.runner.forge import arun

    cfg = load_recipe_config("claw-grpo", overrides=[
        "harness.name=pi", f"harness.per_harness.pi.binary={tmp_path / 'no-pi'}", f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(HarnessNotInstalled, match="not an executable file"):
        asyncio.run(arun(cfg, progress=False))
    assert not (tmp_path / "run").exists()  # nothing started: no run directory, no model loaded


def test_a_plugin_harness_that_keeps_its_own_kwargs_is_not_second_guessed(monkeypatch):
    from openforge.harness import Harness
    from openforge.harnesses.options import option_problems
    from openforge.plugins import HARNESSES

    class Closed(Harness):
        def __init__(self, *, depth: int = 1):
            self.depth = depth

    class Open(Harness):
        def __init__(self, **kw: object):
            self.kw = kw

    assert set(harness_options(Closed) or {}) == {"depth"} and harness_options(Open) is None
    monkeypatch.setitem(HARNESSES._refs, "test-closed", Closed)  # registered for this test only
    monkeypatch.setitem(HARNESSES._refs, "test-open", Open)
    assert option_problems("test-closed", {"depth": "deep", "width": 2}, "harness.options") == [
        "harness.options.depth: Input should be a valid integer, unable to parse string as an integer (got 'deep')",
        "harness.options.width: not an option of test-closed; options: depth"]
    assert option_problems("test-open", {"anything": 1}, "harness.options") == []
