"""The held-out ``before`` cache: a clean measurement of the starting model is reused by the next run
that would measure the same thing, and by no other (``openforge.runner.heldout_eval``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from openforge.core.task import Task
from openforge.envs.claw import ClawEnvironment
from openforge.recipes import load_recipe_config
from openforge.runner import heldout_eval
from openforge.runner.heldout_eval import before_key, heldout_before, heldout_warmstart, warmstart_key

TASKS = [Task(id="a", instruction="do a"), Task(id="b", instruction="do b")]
ENV = ClawEnvironment()


def _cfg(tmp_path: Path, *overrides: str):
    return load_recipe_config("claw-grpo", overrides=[f"cache_dir={tmp_path / 'cache'}", *overrides])


def test_the_key_holds_everything_that_shapes_the_measurement(tmp_path):
    def key(*o: str, tasks=TASKS, backend="TransformersBackend") -> str:
        return before_key(_cfg(tmp_path, *o), tasks, backend=backend, env=ENV)

    base = key()
    assert key() == base == key("harness.name=[react]") == key("rollout.group_size=8", "trainer.steps=9")
    changed = [key("model.name=other"), key("rollout.max_tokens=100"), key("rollout.temperature=0.7"),
               key("harness.name=pi"), key("harness.per_harness.react.max_turns=6"), key("eval.heldout.trials=5"),
               key("seed=1"), key("env.options={faults: {rate: 0.5}}"), key(tasks=TASKS[:1]),
               key(backend="ReferenceBackend"), key("launcher.options={isolation: unshare}"),
               key("eval.heldout.max_tokens=64"), key("eval.heldout.max_tokens=256")]
    assert base not in changed and len(set(changed)) == len(changed)


def test_a_local_model_directory_is_keyed_by_its_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"x" * 10)
    first = before_key(_cfg(tmp_path, f"model.name={model}"), TASKS, backend="B", env=ENV)
    (model / "model.safetensors").write_bytes(b"y" * 11)  # retrained in place
    assert before_key(_cfg(tmp_path, f"model.name={model}"), TASKS, backend="B", env=ENV) != first


@pytest.fixture
def runs(monkeypatch, tmp_path):
    """heldout_before on a stand-in run whose ``before`` rollouts are scripted (``infra``: lost ones)."""
    calls: list[Path] = []

    async def run_point(forge, tasks, point, *, label, **_):
        calls.append(forge.run_dir)
        out = {"point": point, "label": label, "per_harness": {"react": {
            "successes": 1, "trials": 6 - forge.infra, "infra_failures": forge.infra,
            "outcomes": {"a": [1, 0, 0], "b": [0, 0, 0][: 3 - forge.infra]}}}}
        d = forge.run_dir / "heldout" / point
        d.mkdir(parents=True)
        (d / "heldout.json").write_text(json.dumps(out))
        (d / "trajectories.jsonl").write_text("{}\n")
        return out

    monkeypatch.setattr(heldout_eval, "run_point", run_point)

    async def run(name: str, *overrides: str, infra: int = 0) -> dict:
        forge = SimpleNamespace(cfg=_cfg(tmp_path, *overrides), run_dir=tmp_path / name, infra=infra,
                                console=Console(quiet=True), backend=object(), env=ENV)
        return (await heldout_before(forge, TASKS))["before"]

    return run, calls


async def test_a_clean_before_is_reused_by_the_next_run(runs, tmp_path):
    run, calls = runs
    first = await run("one")
    second = await run("two")
    assert calls == [tmp_path / "one"]  # the second run rolled nothing out
    assert first["label"] == "start" and second["label"] == "start, cached"
    assert second["per_harness"] == first["per_harness"]
    assert (tmp_path / "two" / "heldout" / "before" / "trajectories.jsonl").is_file()  # the whole eval dir
    await run("three", "rollout.max_tokens=99")  # measures something else
    assert calls == [tmp_path / "one", tmp_path / "three"]


async def test_a_before_with_infrastructure_losses_is_not_kept(runs, tmp_path):
    run, calls = runs
    await run("one", infra=2)  # e.g. a loaded machine's timeouts
    await run("two")
    assert calls == [tmp_path / "one", tmp_path / "two"]


async def test_cache_off_measures_every_time(runs, tmp_path):
    run, calls = runs
    await run("one", "eval.heldout.cache=false")
    await run("two", "eval.heldout.cache=false")
    assert len(calls) == 2 and not (tmp_path / "cache" / "heldout").exists()


async def test_a_cached_point_without_outcomes_is_measured_again(runs, tmp_path):
    """A point cached before points were paired cannot be paired: it is a miss, not a silent unpaired row."""
    run, calls = runs
    await run("one")
    [cached] = (tmp_path / "cache" / "heldout").iterdir()
    point = json.loads((cached / "heldout.json").read_text())
    del point["per_harness"]["react"]["outcomes"]
    (cached / "heldout.json").write_text(json.dumps(point))
    await run("two")
    assert calls == [tmp_path / "one", tmp_path / "two"]


async def test_the_warm_start_point_is_cached_under_its_warm_start(runs, tmp_path):
    """Keyed by everything that shapes ``before`` and by the warm-start's own key; never cached when the
    warm-start's weights are not (``sft_key=None``)."""
    _, calls = runs

    async def warm(name: str, sft_key: str | None) -> dict:
        forge = SimpleNamespace(cfg=_cfg(tmp_path), run_dir=tmp_path / name, infra=0, console=Console(quiet=True),
                                backend=object(), env=ENV)
        return (await heldout_warmstart(forge, TASKS, {}, sft_key=sft_key))["warmstart"]

    first = await warm("one", "k1")
    second = await warm("two", "k1")
    await warm("three", "k2")
    await warm("four", None)
    await warm("five", None)
    assert calls == [tmp_path / n for n in ("one", "three", "four", "five")]
    assert first["label"] == "SFT" and second["label"] == "SFT, cached"
    cfg = _cfg(tmp_path)
    keys = {warmstart_key(cfg, TASKS, backend="B", env=ENV, sft_key=k) for k in ("k1", "k2")}
    keys |= {warmstart_key(_cfg(tmp_path, "seed=3"), TASKS, backend="B", env=ENV, sft_key="k1")}
    assert len(keys) == 3 and before_key(cfg, TASKS, backend="B", env=ENV) not in keys
