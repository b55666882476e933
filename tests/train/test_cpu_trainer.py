"""The built-in CPU trainer on real transformers models (a tiny random llama; SmolLM2 when slow)."""

from __future__ import annotations

import copy

import pytest

from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall
from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
from openforge.train.grpo import TrainSample, build_samples
from openforge.train.logprobs import pack_microbatches, token_logprobs

torch = pytest.importorskip("torch")


def test_pack_microbatches():
    assert pack_microbatches([10, 50, 20, 40], 100) == [[1, 3], [2, 0]]
    assert pack_microbatches([500, 3], 100) == [[0], [1]]  # oversize sequence alone
    assert pack_microbatches([], 100) == []


def test_chunked_logprobs_match_full_forward(tiny_llama):
    ids = torch.randint(2, 96, (3, 40))
    attn = torch.ones_like(ids)
    attn[1, 30:] = 0
    full = torch.log_softmax(tiny_llama(input_ids=ids, attention_mask=attn).logits[:, :-1] / 0.7, -1)
    want = full.gather(-1, ids[:, 1:, None])[..., 0]
    got = token_logprobs(tiny_llama, ids, attn, temperature=0.7, chunk=8)
    assert torch.allclose(got[0], want[0], atol=1e-5)
    assert torch.allclose(got[1, :29], want[1, :29], atol=1e-5)


async def _rollout(backend, prompt: list[int], max_tokens: int = 6) -> ModelCall:
    from openforge.proxy.backends.base import SamplingParams

    g = await backend.generate(prompt, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=len(prompt)))
    return ModelCall(index=0, prompt_ids=prompt, output_ids=g.output_ids, output_logprobs=g.logprobs)


def _group(calls_rewards: list[tuple[ModelCall, float]]) -> TrajectoryGroup:
    trajs = [Trajectory(rollout_id=f"r{i}", task_id="t", reward=r, calls=[c]).build()
             for i, (c, r) in enumerate(calls_rewards)]
    return TrajectoryGroup(task_id="t", trajectories=trajs)


async def test_grpo_step_on_backend_rollouts(tiny_llama, tmp_path):
    """Rollouts sampled by the real TransformersBackend; the trainer recomputes their behaviour
    logprobs exactly (fp32), and one step moves probability towards the rewarded rollout."""
    tb = pytest.importorskip("openforge.proxy.backends.transformers")
    backend = tb.TransformersBackend(tiny_llama, tokenizer=None)
    calls = [await _rollout(backend, [5, 6, 7, 8 + i]) for i in range(4)]
    group = _group([(c, 1.0 if i == 0 else 0.0) for i, c in enumerate(calls)])
    samples = build_samples([group])
    trainer = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2, micro_batch_tokens=16, logprob_chunk=4))

    def seq_logp(c: ModelCall) -> float:
        ids = torch.tensor([c.prompt_ids + c.output_ids])
        with torch.no_grad():
            lp = token_logprobs(tiny_llama, ids, torch.ones_like(ids))
        return float(lp[0, len(c.prompt_ids) - 1:].sum())

    before = [seq_logp(c) for c in calls]
    m = trainer.step(samples)
    assert m["behaviour_logprob_gap"] < 1e-4  # generation and training agree in fp32
    assert m["micro_batches"] > 1 and m["trained_tokens"] == sum(len(c.output_ids) for c in calls)
    after = [seq_logp(c) for c in calls]
    assert after[0] > before[0]  # the rewarded rollout became more likely
    assert sum(after[1:]) < sum(before[1:])
    await trainer.publish(backend)  # same module: nothing to copy, the back-end serves it already
    assert backend.model is trainer.model


def test_microbatching_does_not_change_the_gradient(tiny_llama):
    g = torch.Generator().manual_seed(1)

    def sample(n: int, adv: float) -> TrainSample:
        ids = torch.randint(2, 96, (n,), generator=g).tolist()
        mask = [0] * (n // 2) + [1] * (n - n // 2)
        return TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask], advantage=adv,
                           token_weights=[m / 40 for m in mask])

    samples = [sample(n, a) for n, a in [(12, 1.0), (30, -0.5), (20, 0.7), (9, -1.2)]]
    grads = []
    for budget in (10_000, 30):
        model = copy.deepcopy(tiny_llama)
        tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-3, grad_clip=1e9))
        # capture the accumulated gradient only (at the optimizer step: the trainer drops it after)
        tr.optimizer.step = lambda tr=tr: grads.append(torch.cat([p.grad.flatten() for p in tr.params]))
        tr.config.micro_batch_tokens = budget
        tr.step(samples)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_sft_step_and_checkpoint_resume(tiny_llama, tmp_path):
    ids = list(range(10, 30))
    mask = [0] * 8 + [1] * 12
    s = TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * 20, advantage=0.0,
                    token_weights=[m / 12 for m in mask])
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=5e-3))
    losses = [tr.step([s], kind="sft")["loss"] for _ in range(5)]
    assert losses[-1] < losses[0]
    path = tr.save(tmp_path / "ckpt", extra={"note": "x"})
    fresh = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)
    tr2 = CPUTrainer(fresh, CPUTrainerConfig(lr=5e-3))
    meta = tr2.load(path)
    assert meta["step"] == 5 and meta["note"] == "x" and tr2.step_count == 5
    for (k, a), b in zip(tiny_llama.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    # the optimizer state came back too: the next step is identical on both
    tr.step([s], kind="sft")
    tr2.step([s], kind="sft")
    for a, b in zip(tiny_llama.parameters(), fresh.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7)


def test_load_rejects_foreign_checkpoint(tiny_llama, tmp_path):
    from openforge.core.errors import ConfigError

    tr = CPUTrainer(tiny_llama)
    with pytest.raises(ConfigError, match="no checkpoint weights"):
        tr.load(tmp_path)


def test_sft_step_bf16_autocast(tiny_llama):
    ids = list(range(10, 40))
    mask = [0] * 10 + [1] * 20
    s = TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * 30, advantage=0.0,
                    token_weights=[m / 20 for m in mask])
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=5e-3, autocast_bf16=True))
    losses = [tr.step([s], kind="sft")["loss"] for _ in range(4)]
    assert losses[-1] < losses[0]
    assert next(tiny_llama.parameters()).dtype == torch.float32  # master weights stay fp32


def test_trainable_layers_freezes_the_rest(tiny_llama):
    ids = list(range(10, 30))
    mask = [0] * 10 + [1] * 10
    s = TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * 20, advantage=0.0,
                    token_weights=[m / 10 for m in mask])
    before = {k: v.clone() for k, v in tiny_llama.state_dict().items()}
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2, trainable_layers=1))
    tr.step([s], kind="sft")
    after = tiny_llama.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith(("model.layers.1.", "model.norm.")) for k in changed), changed
    # a full trainer on the same module takes every parameter back
    CPUTrainer(tiny_llama).step([s], kind="sft")
    assert all(p.requires_grad for p in tiny_llama.parameters())


def test_bf16_autocast_auto_only_where_the_cpu_has_native_bf16(monkeypatch):
    """Emulated bf16 made one SFT step of the main job take >13 min on an AVX2-only CPU (fp32: ~2 min)."""
    torch = pytest.importorskip("torch")
    from openforge.train.cpu import use_bf16_autocast

    assert use_bf16_autocast(True) is True and use_bf16_autocast(False) is False
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert use_bf16_autocast("auto") is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert use_bf16_autocast("auto") is True


def test_logprobs_at_selected_positions_match_the_full_ones(tiny_llama):
    ids = torch.randint(2, 96, (3, 40))
    attn = torch.ones_like(ids)
    attn[1, 30:] = 0
    pos = torch.zeros(3, 39, dtype=torch.bool)
    pos[0, 20:] = True
    pos[1, 5:9] = True  # row 2: nothing selected
    full = token_logprobs(tiny_llama, ids, attn, temperature=0.7, chunk=8)
    (full * pos).sum().backward()
    want = [p.grad.clone() for p in tiny_llama.parameters()]
    tiny_llama.zero_grad(set_to_none=True)
    got = token_logprobs(tiny_llama, ids, attn, temperature=0.7, chunk=8, positions=pos)
    assert torch.allclose(got[pos], full[pos].detach(), atol=1e-5) and not got[~pos].any()
    got.sum().backward()
    for a, b in zip(want, (p.grad for p in tiny_llama.parameters()), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_trainer_runs_the_head_only_where_it_trains(tiny_llama):
    """A ~1.5k-token harness prompt with a short answer: the lm_head / log_softmax (a vocabulary-wide
    matmul per position) runs on the generated tokens only, not on the prompt."""
    rows: list[int] = []
    tiny_llama.get_output_embeddings().register_forward_hook(lambda m, i, o: rows.append(i[0].shape[:-1].numel()))
    mask = [0] * 50 + [1] * 10
    s = TrainSample(input_ids=list(range(2, 62)), loss_mask=mask, old_logprobs=[-4.0 * m for m in mask],
                    advantage=1.0, token_weights=[m / 10 for m in mask])
    CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-3, kl_coef=0.1)).step([s, s])
    # 2 samples × 10 trained positions; run again to rebuild the logits in backward; the KL reference; and
    # the last micro-batch once more after the update (diag/kl_step)
    assert sum(rows) == 4 * 2 * 10


def _live_state(model) -> list:
    """Optimizers still alive that hold state for ``model``'s parameters."""
    import gc

    gc.collect()
    mine = {id(p) for p in model.parameters()}
    return [o for o in gc.get_objects() if issubclass(type(o), torch.optim.Optimizer) and o.state
            and any(id(p) in mine for g in o.param_groups for p in g["params"])]


def test_no_gradient_or_warm_start_optimizer_outlives_its_step(tiny_llama):
    """Memory: a step's gradients are dropped after its optimizer step, and the SFT warm-start's AdamW
    state (two fp32 copies of the model) does not outlive the warm-start."""
    from openforge.train.sft import sft_train

    model = copy.deepcopy(tiny_llama)
    ids = list(range(10, 30))
    mask = [0] * 8 + [1] * 12
    s = TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * 20, advantage=0.0, token_weights=mask)
    tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-3))
    tr.step([s], kind="sft")
    assert all(p.grad is None for p in model.parameters())
    assert _live_state(model) == [tr.optimizer]  # GRPO's own optimizer keeps its moments between steps
    del tr
    stats = sft_train(model, [s, s], lr=1e-3, epochs=2, batch_size=1)
    assert stats["steps"] == 4 and _live_state(model) == []
    assert all(p.grad is None for p in model.parameters())


def test_gradient_checkpointing_recomputes_layers_and_keeps_the_gradient(tiny_llama):
    """``gradient_checkpointing``: every decoder layer runs forward twice (once more during backward), the
    accumulated gradient is the one without it, and only the layers' own flag is raised: an attention
    dropout that train mode would switch on stays off (the logprobs stay the back-end's), and after the
    step no module is left in train mode (the back-end generates with the same module)."""
    g = torch.Generator().manual_seed(3)
    samples = []
    for n, adv in [(14, 1.0), (22, -0.8), (18, 0.5)]:
        ids = torch.randint(2, 96, (n,), generator=g).tolist()
        mask = [0] * (n // 2) + [1] * (n - n // 2)
        samples.append(TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask],
                                   advantage=adv, token_weights=[m / 30 for m in mask]))
    grads, calls = [], []
    for ckpt in (False, True):
        model = copy.deepcopy(tiny_llama)
        for layer in model.model.layers:
            layer.self_attn.attention_dropout = 0.5  # only ever applied in train mode
        n = [0]
        for layer in model.model.layers:
            # a pre-hook: the recomputation stops early, once the last saved tensor is rebuilt
            layer.register_forward_pre_hook(lambda *_, n=n: n.__setitem__(0, n[0] + 1))
        tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-3, grad_clip=1e9, gradient_checkpointing=ckpt))
        tr.optimizer.step = lambda tr=tr: grads.append(torch.cat([p.grad.flatten() for p in tr.params]))
        tr.step(samples)
        calls.append(n[0])
        assert not any(m.training for m in model.modules())
    layers = len(tiny_llama.model.layers)
    extra = layers  # the last micro-batch's forward after the update (diag/kl_step): no gradient, no recompute
    assert calls[1] - extra == 2 * (calls[0] - extra) and calls[0] % layers == 0
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_trim_memory_returns_the_heap_after_every_micro_batch_and_keeps_the_gradient(tiny_llama, monkeypatch):
    """``trim_memory``: glibc's free pages go back after each micro-batch's backward (so the step's peak RSS
    does not also hold earlier micro-batches' freed activations); the gradient is the same without it."""
    import openforge.train.cpu as cpu

    g = torch.Generator().manual_seed(5)
    samples = []
    for n in (30, 26, 34, 28):
        ids = torch.randint(2, 96, (n,), generator=g).tolist()
        mask = [0] * (n // 2) + [1] * (n - n // 2)
        samples.append(TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask],
                                   advantage=1.0 if n % 4 else -1.0, token_weights=[m / 60 for m in mask]))
    grads, trims = [], []
    for trim in (False, True):
        count = [0]
        monkeypatch.setattr(cpu, "trim_heap", lambda count=count: count.__setitem__(0, count[0] + 1))
        model = copy.deepcopy(tiny_llama)
        tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-3, grad_clip=1e9, micro_batch_tokens=40, trim_memory=trim))
        tr.optimizer.step = lambda tr=tr: grads.append(torch.cat([p.grad.flatten() for p in tr.params]))
        m = tr.step(samples)
        trims.append(count[0])
    assert m["micro_batches"] == 4 and trims == [0, 4]
    assert torch.allclose(grads[0], grads[1], atol=1e-7)


def test_release_optimizer_state_drops_adams_moments_and_a_later_step_starts_them_afresh(tiny_llama):
    """The final held-out point runs without AdamW's moments (twice the weights) once the last checkpoint
    holds them; a step after that still trains."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(2, 96, (20,), generator=g).tolist()
    mask = [0] * 10 + [1] * 10
    sample = TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask], advantage=0.0,
                         token_weights=[m / 10 for m in mask])
    tr = CPUTrainer(copy.deepcopy(tiny_llama), CPUTrainerConfig(lr=1e-3))
    tr.step([sample], kind="sft")
    assert len(tr.optimizer.state) == len(tr.params)
    tr.release_optimizer_state()
    assert len(tr.optimizer.state) == 0
    before = [p.detach().clone() for p in tr.params]
    tr.step([sample], kind="sft")
    assert len(tr.optimizer.state) == len(tr.params)
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.params))
