"""Tasks by epochs, through ``Forge.train``: 50 steps of scripted rollouts over 12 tasks (4 per step, 2
resample rounds: counts for which the old fixed stride drew the same 4 tasks at every step) see every
task, each as often as the others (once per epoch); every step trains on exactly the mixed groups it
reached and reports them against its target. A run killed while a checkpoint is saved resumes with the
weights, optimizer state and KL reference of the step the manifest names, and draws the very tasks the
uninterrupted run draws.

The rollout layer is replaced by scripted groups (a task's rewards depend on the task only); the trainer
(real AdamW steps on a tiny llama), the proxy pause/resume, the checkpoints and the manifest are real."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from openforge.config import RunConfig
from openforge.core.task import Task

from .test_checkpoint_crash import Crash, crash_at, fresh_llama
from .test_dynamic_sampling import ScriptedRewards

torch = pytest.importorskip("torch")

TASKS = [Task(id=f"task-{i:02d}", instruction="x") for i in range(12)]


class _Tasks:
    """An environment's task list (``load_tasks`` reads nothing else)."""

    def tasks(self, split=None):
        return list(TASKS)


def rewards(tasks):
    """Two thirds of the tasks give mixed groups, the others tied ones (so steps resample)."""
    return [[1.0, 0.0] if int(t.id[-2:]) % 3 else [float(int(t.id[-2:]) % 2)] * 2 for t in tasks]


async def _forge(run_dir, steps, *, model, tokenizer, **trainer):
    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.runner.session import Session
    from openforge.train.cpu import CPUTrainer

    cfg = RunConfig(run_dir=str(run_dir), seed=5, rollout={"tasks_per_step": 4, "group_size": 2},
                    trainer={"steps": steps, **trainer,
                             "cpu": {"lr": 1e-3, "micro_batch_tokens": 64, "max_resample_rounds": 2,
                                     "kl_coef": 0.05}})
    f = ScriptedRewards(cfg, rewards)
    f.run_dir.mkdir(parents=True, exist_ok=True)
    f.model, f.tokenizer = model, tokenizer
    f.backend = TransformersBackend(model, tokenizer)
    f.session = await Session(f.backend, environment=_Tasks()).start()  # a real proxy, no rollouts
    f.trainer = CPUTrainer(model, cfg.trainer.cpu)
    return f


async def _train(f):
    try:
        return await f.train()
    finally:
        await f.__aexit__()


async def test_two_dozen_steps_over_twelve_tasks_see_every_task_once_per_epoch(tokenizer, tmp_path):
    # 24 steps of 4+ groups: 8+ epochs of the 12 tasks
    f = await _forge(tmp_path / "run", 24, model=fresh_llama(), tokenizer=tokenizer, checkpoint_every=12)
    summary = await _train(f)
    drawn = [t for r in f.drawn for t in r]
    counts = Counter(drawn)
    assert set(counts) == {t.id for t in TASKS}, f"tasks never trained: {sorted({t.id for t in TASKS} - set(counts))}"
    assert max(counts.values()) - min(counts.values()) <= 1, counts  # once per epoch, whatever the rounds
    for e in range(len(drawn) // 12):
        assert sorted(drawn[12 * e:12 * (e + 1)]) == sorted(t.id for t in TASKS)
    assert len({tuple(drawn[12 * e:12 * (e + 1)]) for e in range(len(drawn) // 12)}) > 1  # reshuffled
    assert summary["task_epochs"] == pytest.approx(len(drawn) / 12, abs=1e-3)

    # every step: trained on exactly the mixed groups it reached and reported, against its target
    steps = summary["steps"]
    assert len(steps) == 24 and sum(s["groups"] for s in steps) == len(drawn)
    for s in steps:
        assert s["mixed_target"] == 4
        assert s["mixed_groups"] >= s["mixed_target"] or s["resample_rounds"] == 2, s
        assert s["gradient_step"] is True and s["train/trained_tokens"] == 6 * s["mixed_groups"], s
    mixed = summary["mixed_groups"]
    assert mixed["reached"] == sum(s["mixed_groups"] for s in steps) and mixed["target"] == 96
    assert mixed["steps_at_target"] + len(mixed["steps_below_target"]) == 24
    logged = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(x["mixed_groups"], x["mixed_target"]) for x in logged] == [(s["mixed_groups"], 4) for s in steps]


@pytest.mark.parametrize("phase", ["written", "cleaning"])
async def test_a_run_killed_while_checkpointing_resumes_the_same_tasks_and_state(tokenizer, tmp_path, monkeypatch,
                                                                               phase):
    initial = {k: v.clone() for k, v in fresh_llama().state_dict().items()}
    whole = await _forge(tmp_path / "whole", 7, model=fresh_llama(), tokenizer=tokenizer, keep_checkpoints=1)
    await _train(whole)
    expected = whole.drawn

    killed = await _forge(tmp_path / "run", 7, model=fresh_llama(), tokenizer=tokenizer, keep_checkpoints=1)
    with crash_at(monkeypatch, phase, 4), pytest.raises(Crash):
        await _train(killed)
    again = await _forge(tmp_path / "run", 7, model=fresh_llama(1), tokenizer=tokenizer, keep_checkpoints=1)
    summary = await _train(again)
    resumed_at = 4 if phase == "cleaning" else 3  # committed, or redone
    assert [s["step"] for s in summary["steps"]] == list(range(resumed_at + 1, 8))
    # the same sequence of tasks as the run that was never interrupted
    assert again.drawn == expected[len(expected) - len(again.drawn):]
    assert killed.drawn[:len(expected) - len(again.drawn)] == expected[:len(expected) - len(again.drawn)]
    # the full training state came back: optimizer steps counted on, the run's own KL reference
    assert again.trainer.step_count == whole.trainer.step_count == 7
    ref = again.trainer.ref_model.state_dict()
    assert all(torch.equal(ref[k], v) for k, v in initial.items())
    final = {k: v for k, v in again.model.state_dict().items()}
    assert all(torch.allclose(final[k], v, atol=1e-6) for k, v in whole.model.state_dict().items())


async def test_a_resume_without_the_optimizer_state_refuses_unless_told_to_start_it_fresh(tokenizer, tmp_path):
    from openforge.core.errors import ForgeError

    first = await _forge(tmp_path / "run", 2, model=fresh_llama(), tokenizer=tokenizer)
    await _train(first)
    (tmp_path / "run" / "checkpoints" / "step-2" / "trainer_state.pt").unlink()
    refused = await _forge(tmp_path / "run", 3, model=fresh_llama(1), tokenizer=tokenizer)
    with pytest.raises(ForgeError, match=r"trainer_state\.pt \(optimizer state\) is missing"):
        await _train(refused)
    assert refused.drawn == []  # nothing rolled out, nothing trained
    fresh = await _forge(tmp_path / "run", 3, model=fresh_llama(1), tokenizer=tokenizer,
                         resume_missing_state="fresh")
    summary = await _train(fresh)
    assert [s["step"] for s in summary["steps"]] == [3]
    assert fresh.trainer.step_count == 1  # a fresh AdamW (the run log says so: Checkpoints.notes)
