"""Checkpoints are complete model directories; unchanged weights are not written again; retention keeps
the last N and the best; a directory that is not a model gets an error naming what is missing.

Real pieces: the CPU trainer on a tiny random llama (real optimizer steps), SmolLM2's tokenizer and the
proxy's own Hermes template, plain ``transformers`` loading the result."""

from __future__ import annotations

import json
import shutil

import pytest

from openforge.config import load_config
from openforge.core.errors import ConfigError


def _cfg(**trainer):
    return load_config({"recipe": "ckpt-test", "model": {"name": "smollm2-135m"},
                        "trainer": {"steps": 5, **trainer}})


def _sample():
    from openforge.train.grpo import TrainSample

    ids = [3, 5, 7, 9, 11, 13]
    mask = [0, 0, 1, 1, 1, 1]
    return TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask], advantage=1.0,
                       token_weights=[m / 4 for m in mask])


@pytest.fixture
def make(tmp_path, tiny_llama, tokenizer):
    from openforge.proxy.render import hermes_template
    from openforge.train.checkpoint import Checkpoints
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    def build(run="run", **trainer):
        tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2))
        return Checkpoints(tmp_path / run, _cfg(**trainer), trainer=tr, tokenizer=tokenizer,
                           template=hermes_template(), parser="hermes"), tr
    return build


def _steps(ck, tr, rewards, trained):
    """GRPO steps with the given rewards; ``trained[i]``: whether step i+1 ran an optimizer step."""
    for i, (r, t) in enumerate(zip(rewards, trained)):
        if t:
            tr.step([_sample()])
        ck.after_step(i + 1, {"reward_mean": r, "rollouts": 4, "gradient_step": t}, due=True)


def test_checkpoint_is_a_complete_model(make, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openforge.proxy.render import hermes_template
    from openforge.util.modeldir import check_model_dir, read_meta

    ck, tr = make()
    ck.weights_changed_before_training()  # e.g. an SFT warm-start
    _steps(ck, tr, [0.5], [True])
    d = ck.dir / "step-1"
    check_model_dir(d)
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    assert tok.chat_template == hermes_template()  # the exact template that rendered the training prompts
    assert tok.eos_token == "<|im_end|>" and tok.clean_up_tokenization_spaces is False
    msgs = [{"role": "user", "content": "list files"}]
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]
    assert tok.apply_chat_template(msgs, tools=tools, tokenize=False) == tokenizer.apply_chat_template(
        msgs, tools=tools, chat_template=hermes_template(), tokenize=False)
    model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True)
    assert model.config.hidden_size == 32
    meta = read_meta(d)
    assert meta.step == 1 and meta.tool_call_parser == "hermes" and meta.recipe == "ckpt-test"
    assert meta.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct" and meta.harnesses == ["react"]
    assert not list(ck.dir.glob(".*tmp"))  # written under a temporary name, then renamed


def test_a_step_that_changed_nothing_writes_no_checkpoint(make):
    ck, tr = make(keep_checkpoints=None)
    _steps(ck, tr, [0.0, 0.5, 0.5, 0.25], [False, True, False, True])
    assert [p.name for p in ck.saved()] == ["step-2", "step-4"]  # steps 1 and 3 trained nothing
    idx = json.loads((ck.dir / "index.json").read_text())
    by = {e["step"]: e for e in idx["steps"]}
    assert by[1]["checkpoint"] == "initial" and by[3]["checkpoint"] == "step-2" and by[4]["checkpoint"] == "step-4"
    assert by[3]["sampled_with"] == "step-2" and by[2]["sampled_with"] == "initial"


def test_retention_keeps_the_last_n_and_the_best(make):
    ck, tr = make(keep_checkpoints=2, keep_best=True)
    # step K's weights sampled step K+1: scores step-1 0.9, step-2 0.2, step-3 0.1, step-4 0.3
    _steps(ck, tr, [0.1, 0.9, 0.2, 0.1, 0.3], [True] * 5)
    assert [p.name for p in ck.saved()] == ["step-1", "step-4", "step-5"]
    assert ck.best() == "step-1"
    # only the latest keeps what resuming needs; every kept one stays a complete model
    assert (ck.dir / "step-5" / "trainer_state.pt").is_file()
    assert not (ck.dir / "step-1" / "trainer_state.pt").exists()
    from openforge.util.modeldir import check_model_dir

    for p in ck.saved():
        check_model_dir(p)


def test_retention_without_best(make):
    ck, tr = make("r2", keep_checkpoints=1, keep_best=False)
    _steps(ck, tr, [0.1, 0.9, 0.2], [True] * 3)
    assert [p.name for p in ck.saved()] == ["step-3"]


def test_resume_point_after_unchanged_steps(make):
    ck, tr = make(keep_checkpoints=None)
    _steps(ck, tr, [0.0, 0.5, 0.5], [False, True, False])
    again, _ = make(keep_checkpoints=None)
    path, done = again.resume_point()
    assert path.name == "step-2" and done == 3  # step 3 is done; its weights are step-2's


def test_resolve_checkpoint_selectors(make, tmp_path):
    from openforge.util.modeldir import resolve_checkpoint

    ck, tr = make(keep_checkpoints=2, keep_best=True)
    _steps(ck, tr, [0.1, 0.9, 0.2, 0.1, 0.3], [True] * 5)
    run = ck.run_dir
    (run / "config.yaml").write_text("model:\n  name: smollm2-135m\n")
    assert resolve_checkpoint(run, "last").name == "step-5"
    assert resolve_checkpoint(run, "best").name == "step-1"
    assert resolve_checkpoint(run, "4").name == "step-4"
    assert resolve_checkpoint(run, "base") == "smollm2-135m"
    with pytest.raises(ConfigError, match=r"removed by retention.*kept: step-1, step-4, step-5"):
        resolve_checkpoint(run, "2")
    with pytest.raises(ConfigError, match="no GRPO step 9"):
        resolve_checkpoint(run, "9")


def test_not_a_model_is_named(make, tmp_path):
    from openforge.proxy.backends import parse_backend_spec
    from openforge.util.modeldir import check_model_dir

    ck, tr = make()
    ck.weights_changed_before_training()
    _steps(ck, tr, [0.5], [True])
    old = tmp_path / "old"  # a checkpoint as openforge wrote them before: weights + config, no tokenizer
    shutil.copytree(ck.dir / "step-1", old)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "openforge.json"):
        (old / f).unlink()
    with pytest.raises(ConfigError, match=r"missing tokenizer files.*forge export model"):
        parse_backend_spec(f"transformers:{old}")
    (ck.dir / "step-1" / "chat_template.jinja").unlink()
    with pytest.raises(ConfigError, match=r"chat_template\.jinja"):
        check_model_dir(ck.dir / "step-1")
    (ck.run_dir / "config.yaml").write_text("recipe: x\n")
    with pytest.raises(ConfigError, match=r"is a run directory.*@last"):
        check_model_dir(ck.run_dir)


class _Tasks:
    """An environment's task list (``load_tasks`` reads nothing else)."""

    def tasks(self, split=None):
        from openforge.core.task import Task

        return [Task(id=f"task-{i}", instruction="x") for i in range(4)]


async def test_forge_train_skips_unchanged_steps_and_resumes(tiny_llama, tokenizer, tmp_path):
    """Through ``Forge.train``: a tied step writes no checkpoint, and a second run resumes after it."""
    from openforge.config import RunConfig
    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.runner.session import Session
    from openforge.train.cpu import CPUTrainer

    from .test_dynamic_sampling import ScriptedRewards

    async def forge(steps, draws):
        cfg = RunConfig(run_dir=str(tmp_path / "run"), rollout={"tasks_per_step": 2, "group_size": 2},
                        trainer={"steps": steps, "keep_checkpoints": None,
                                 "cpu": {"lr": 1e-3, "micro_batch_tokens": 64, "max_resample_rounds": 0}})
        f = ScriptedRewards(cfg, draws)
        f.run_dir.mkdir(parents=True, exist_ok=True)
        f.model, f.tokenizer = tiny_llama, tokenizer
        f.backend = TransformersBackend(tiny_llama, tokenizer)
        f.session = await Session(f.backend, environment=_Tasks()).start()  # a real proxy, no rollouts
        f.trainer = CPUTrainer(tiny_llama, cfg.trainer.cpu)
        return f

    mixed, tied = [[1.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 1.0]]
    first = await forge(3, [mixed, tied, mixed])
    summary = await first.train()
    await first.__aexit__()
    assert [s["gradient_step"] for s in summary["steps"]] == [True, False, True]
    ck = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in ck.glob("step-*")) == ["step-1", "step-3"]  # step 2 changed nothing
    steps = json.loads((ck / "index.json").read_text())["steps"]
    assert [e["checkpoint"] for e in steps] == ["step-1", "step-1", "step-3"]
    again = await forge(4, [mixed])
    summary = await again.train()
    await again.__aexit__()
    assert [s["step"] for s in summary["steps"]] == [4]
    assert again.trainer.step_count == 3  # resumed from step-3 (2 optimizer steps), then step 4
