"""Dynamic sampling in the CPU GRPO loop: a step with fewer than ``target_mixed_groups`` mixed groups
draws the task cursor's next tasks (bounded by ``max_resample_rounds``), then trains on every mixed
group it reached, and says how many against the target; a step left with fewer than
``min_mixed_groups`` says so ("no gradient step") instead of training on them silently. Over a run,
the task cursor makes every task come up once per epoch.

The rollout layer is replaced by recorded groups (the tasks' rewards are scripted per draw); the
trainer, the proxy pause/resume, the metrics file and the summary table are the real ones."""

from __future__ import annotations

import json

import pytest

from openforge.config import RunConfig
from openforge.core.task import Task
from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall
from openforge.runner.forge import Forge
from openforge.runner.rollout import GroupResults
from openforge.runner.run_report import print_summary
from openforge.runner.task_cursor import TaskCursor

torch = pytest.importorskip("torch")


class ScriptedRewards(Forge):
    """A Forge whose rollouts return groups with the rewards scripted per draw (one list per task)."""

    def __init__(self, cfg: RunConfig, draws: list[list[list[float]]]):
        super().__init__(cfg, progress=False)
        self.draws = draws
        self.drawn: list[list[str]] = []

    async def rollouts(self, tasks, group_size, *, proxy=None, min_group=2, **_):
        rewards = self.draws(tasks) if callable(self.draws) else self.draws[len(self.drawn)]
        self.drawn.append([t.id for t in tasks])
        out = GroupResults()
        for ti, (task, rs) in enumerate(zip(tasks, rewards, strict=True)):
            trajs = [Trajectory(rollout_id=f"{len(self.drawn)}-{ti}-{i}", task_id=task.id, reward=r, calls=[
                ModelCall(index=0, prompt_ids=[5, 6, 7], output_ids=[8 + i, 9, 10 + ti],
                          output_logprobs=[-4.0, -4.1, -4.2])]).build() for i, r in enumerate(rs)]
            out.append(TrajectoryGroup(task_id=task.id, trajectories=trajs))
        return out


@pytest.fixture
async def forge_factory(tiny_llama, tokenizer, tmp_path):
    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.runner.session import Session
    from openforge.train.cpu import CPUTrainer

    made: list[Forge] = []

    async def make(draws, **cpu):
        cfg = RunConfig(run_dir=str(tmp_path), rollout={"tasks_per_step": 2, "group_size": 2},
                        trainer={"steps": 1, "cpu": {"lr": 1e-3, "micro_batch_tokens": 64, **cpu}})
        f = ScriptedRewards(cfg, draws)
        f.run_dir.mkdir(parents=True, exist_ok=True)
        f.model = tiny_llama
        f.backend = TransformersBackend(tiny_llama, tokenizer)
        f.session = await Session(f.backend).start()  # a real proxy, paused around the step
        f.trainer = CPUTrainer(tiny_llama, cfg.trainer.cpu)
        made.append(f)
        return f

    yield make
    for f in made:
        await f.__aexit__()


TASKS = [Task(id=f"task-{i}", instruction="x") for i in range(5)]


def cursor(tasks=TASKS):
    return TaskCursor(tasks, seed=0)


async def test_all_tied_first_draw_resamples_then_trains(forge_factory, tmp_path):
    f = await forge_factory([[[0.0, 0.0], [1.0, 1.0]],      # first draw: both groups tied (0/2, 2/2)
                       [[0.0, 0.0], [1.0, 0.0]]],     # resample round 1: one mixed group
                      min_mixed_groups=1, target_mixed_groups=1, max_resample_rounds=2)
    w0 = f.model.get_decoder().layers[-1].mlp.down_proj.weight.detach().clone()
    line = await f._grpo_step(0, cursor())
    assert len(f.drawn) == 2 and f.drawn[1] != f.drawn[0]  # fresh tasks, not the same slots again
    assert line["resample_rounds"] == 1 and line["gradient_step"] is True
    assert line["groups"] == 4 and line["mixed_groups"] == 1 and line["rollouts"] == 8
    assert line["train/trained_tokens"] == 6  # only the mixed group's two rollouts (3 tokens each)
    assert not torch.equal(w0, f.model.get_decoder().layers[-1].mlp.down_proj.weight)  # it really trained
    logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["gradient_step"] is True and logged[-1]["resample_rounds"] == 1


async def test_still_tied_after_the_rounds_says_no_gradient_step(forge_factory, tmp_path):
    from rich.console import Console

    f = await forge_factory([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]]], max_resample_rounds=1)
    w0 = {k: v.clone() for k, v in f.model.state_dict().items()}
    line = await f._grpo_step(0, cursor())
    assert len(f.drawn) == 2  # bounded by max_resample_rounds
    assert line["gradient_step"] is False and line["mixed_groups"] == 0 and line["train/trained_tokens"] == 0
    assert all(torch.equal(v, f.model.state_dict()[k]) for k, v in w0.items())  # nothing trained
    console = Console(record=True, width=200)
    print_summary({"recipe": "r", "run_dir": str(tmp_path), "steps": [line]}, console=console)
    text = console.export_text()
    assert "no gradient step" in text and "0/4" in text


async def test_mixed_first_draw_does_not_resample(forge_factory):
    f = await forge_factory([[[1.0, 0.0], [1.0, 1.0]]], target_mixed_groups=1)
    line = await f._grpo_step(0, cursor())
    assert len(f.drawn) == 1 and line["resample_rounds"] == 0 and line["gradient_step"] is True
    assert line["mixed_groups"] == 1 and line["mixed_target"] == 1


async def test_a_step_is_filled_to_the_target_of_mixed_groups(forge_factory):
    """The default target is a full step (tasks_per_step = 2) of mixed groups: one mixed group of two
    draws another round, and the step trains on every mixed group it reached."""
    f = await forge_factory([[[1.0, 0.0], [1.0, 1.0]],     # 1 of 2 mixed
                             [[0.0, 0.0], [0.0, 1.0]]])    # resample round: 1 more → 2, the target
    line = await f._grpo_step(0, cursor())
    assert len(f.drawn) == 2 and len(set(f.drawn[0] + f.drawn[1])) == 4  # fresh tasks from the cursor
    assert line["resample_rounds"] == 1 and line["mixed_groups"] == 2 and line["mixed_target"] == 2
    assert line["gradient_step"] is True and line["train/trained_tokens"] == 12  # both mixed groups, 2×2×3 tok


async def test_below_the_target_after_the_bounded_rounds_is_reported(forge_factory, tmp_path):
    from rich.console import Console

    from openforge.runner.run_report import mixed_summary

    f = await forge_factory([[[1.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 1.0]]], max_resample_rounds=1)
    line = await f._grpo_step(0, cursor())
    assert len(f.drawn) == 2 and line["mixed_groups"] == 1 and line["mixed_target"] == 2
    assert line["gradient_step"] is True and line["train/trained_tokens"] == 6  # the one group it reached
    summary = {"recipe": "r", "run_dir": str(tmp_path), "steps": [line], "mixed_groups": mixed_summary([line])}
    assert summary["mixed_groups"] == {"reached": 1, "target": 2, "steps_at_target": 0, "steps_below_target": [1]}
    console = Console(record=True, width=200)
    print_summary(summary, console=console)
    text = console.export_text()
    assert "1 reached of a target of 2" in text and "step(s) 1" in text


async def test_fewer_mixed_groups_than_the_floor_train_nothing(forge_factory):
    f = await forge_factory([[[1.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 1.0]]], min_mixed_groups=2,
                            max_resample_rounds=1)
    w0 = {k: v.clone() for k, v in f.model.state_dict().items()}
    line = await f._grpo_step(0, cursor())
    assert line["mixed_groups"] == 1 and line["gradient_step"] is False and line["train/trained_tokens"] == 0
    assert all(torch.equal(v, f.model.state_dict()[k]) for k, v in w0.items())


def test_target_below_the_floor_is_a_config_error():
    from openforge.config import load_config
    from openforge.core.errors import ConfigError

    with pytest.raises(ConfigError, match="target_mixed_groups"):
        load_config({"trainer": {"cpu": {"min_mixed_groups": 3, "target_mixed_groups": 2}}})
    plan_cfg = load_config({"rollout": {"tasks_per_step": 4}, "trainer": {"cpu": {"min_mixed_groups": 0}}})
    from openforge.runner.step_sampling import SamplingPlan

    assert SamplingPlan.from_config(plan_cfg, 12).target == 0  # min_mixed_groups: 0 still turns it off
    assert SamplingPlan.from_config(load_config({"rollout": {"tasks_per_step": 4}}), 12).target == 4
    assert SamplingPlan.from_config(load_config({"rollout": {"tasks_per_step": 4}}), 3).target == 3



async def test_step_line_carries_every_diag_key_and_the_summary_ends_with_a_verdict(forge_factory, tmp_path):
    from rich.console import Console

    from openforge.analysis.diagnose import DIAG_KEYS

    f = await forge_factory([[[0.0, 0.0], [1.0, 0.0]]], min_mixed_groups=1, target_mixed_groups=1)
    line = await f._grpo_step(0, cursor())
    logged = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert all(isinstance(logged[k], float) for k in DIAG_KEYS), {k: logged.get(k) for k in DIAG_KEYS}
    assert logged["diag/tied_share"] == 0.5 and logged["diag/trained_tokens"] == line["train/trained_tokens"] > 0
    console = Console(record=True, width=200)
    print_summary({"recipe": "r", "run_dir": str(tmp_path), "steps": [line]}, console=console)
    last = console.export_text().strip().splitlines()[-1]
    assert last.startswith("verdict: ")
