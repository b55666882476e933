"""``trainer.cpu.save_optimizer_state=false`` (the ``test`` preset's): a checkpoint holds the weights
without AdamW's state (two more copies of every weight: a one-step ``test`` run wrote 1.6 GB), and a
resume from it still works — the saved weights, the step count carried on, a fresh AdamW that the log
names — instead of refusing as a checkpoint whose state went missing. Real CPU trainer on a tiny llama,
real optimizer steps, the real checkpoint manifest."""

from __future__ import annotations

import pytest

from openforge.config import load_config
from openforge.recipes import load_recipe_config


def _sample():
    from openforge.train.grpo import TrainSample

    ids, mask = [3, 5, 7, 9, 11, 13], [0, 0, 1, 1, 1, 1]
    return TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask], advantage=1.0,
                       token_weights=[m / 4 for m in mask])


@pytest.fixture
def make(tmp_path, tokenizer):
    import torch
    import transformers

    from openforge.proxy.render import hermes_template
    from openforge.train.checkpoint import Checkpoints
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    def build(run: str, save_optimizer_state: bool):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, eos_token_id=1))
        tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-2, save_optimizer_state=save_optimizer_state))
        cfg = load_config({"recipe": "ckpt-test", "model": {"name": "smollm2-135m"}, "trainer": {
            "steps": 5, "cpu": {"save_optimizer_state": save_optimizer_state}}})
        return Checkpoints(tmp_path / run, cfg, trainer=tr, tokenizer=tokenizer, template=hermes_template(),
                           parser="hermes"), tr
    return build


def _train(ck, tr, steps: int) -> None:
    for i in range(steps):
        tr.step([_sample()])
        ck.after_step(i + 1, {"reward_mean": 0.5, "rollouts": 4, "gradient_step": True}, due=True)


def test_without_optimizer_state_a_checkpoint_is_a_third_and_a_resume_starts_a_fresh_adamw(make):
    import torch

    full, tr_full = make("full", True)
    _train(full, tr_full, 2)
    lean, tr = make("lean", False)
    _train(lean, tr, 2)
    step = lean.dir / "step-2"
    assert (full.dir / "step-2" / "trainer_state.pt").is_file()
    assert not (step / "trainer_state.pt").exists()
    weights = (step / "model.safetensors").stat().st_size
    assert full.size_bytes() - lean.size_bytes() > 1.5 * weights  # AdamW's two moments per weight are gone

    again, fresh = make("lean", False)
    path, done = again.resume_point()  # no ForgeError: nothing it was written with is missing
    assert path == step and done == 2
    assert any("fresh AdamW" in n and "save_optimizer_state=false" in n for n in again.notes), again.notes
    fresh.load(path)
    assert fresh.step_count == tr.step_count == 2  # carried on from trainer.json
    assert not fresh.optimizer.state  # a fresh AdamW
    for (name, a), b in zip(tr.model.state_dict().items(), fresh.model.state_dict().values()):
        assert torch.equal(a, b), name
    _train(again, fresh, 1)  # and it trains on from there
    assert fresh.step_count == 3


def test_with_optimizer_state_a_resume_loads_it_and_says_nothing(make):
    ck, tr = make("full", True)
    _train(ck, tr, 1)
    again, fresh = make("full", True)
    path, _ = again.resume_point()
    fresh.load(path)
    assert fresh.optimizer.state and not any("fresh AdamW" in n for n in again.notes)


def test_the_test_preset_keeps_no_optimizer_state_and_the_others_do():
    assert load_recipe_config("claw-grpo", preset="test").trainer.cpu.save_optimizer_state is False
    for preset in ("cpu", "easy", "learn", "faults"):
        assert load_recipe_config("claw-grpo", preset=preset).trainer.cpu.save_optimizer_state is True, preset
