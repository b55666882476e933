"""GRPO you can trust: tied groups, loss-aggregation modes, log-ratio clamp and dual-clip, non-finite
logprobs refused, the KL reference (the policy GRPO starts from, kept across a resume, its logprobs
computed once per step) and logprob pairing through the real proxy with per-token logprobs."""

from __future__ import annotations

import copy
import math

import pytest

from openforge.core.trajectory import (
    NonFiniteLogprobError,
    SegmentValidationError,
    Trajectory,
    TrajectoryGroup,
    build_segments,
    validate_segments,
)
from openforge.core.types import BreakReason, ModelCall, RolloutStatus, Segment
from openforge.train.grpo import build_samples, count_mixed_groups, group_advantages, is_tied, policy_loss

torch = pytest.importorskip("torch")


def _call(i: int, prompt: list[int], out: list[int], lp: float = -1.0) -> ModelCall:
    return ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[lp] * len(out))


def _traj(rid: str, reward: float, calls: list[ModelCall], status=RolloutStatus.SUCCESS) -> Trajectory:
    return Trajectory(rollout_id=rid, task_id="t", reward=reward, status=status, calls=calls).build()


def _group(task: str, rewards: list[float], n_out: int = 2) -> TrajectoryGroup:
    return TrajectoryGroup(task_id=task, trajectories=[
        _traj(f"{task}{i}", r, [_call(0, [1, 2], [3 + i] * n_out)]) for i, r in enumerate(rewards)])


# ------------------------------------------------------------------------------ tied groups


def test_tied_group_is_skipped_not_kept_on_float_noise():
    tied = [0.7] * 8  # float noise: mean != 0.7 exactly, so r - mean is ~1e-16, / (std+eps) ~1e-10
    assert group_advantages(tied) == [0.0] * 8 and is_tied(tied)
    assert not is_tied([0.7] * 7 + [0.8])
    groups = [_group("u", tied), _group("m", [1.0, 0.0])]
    assert count_mixed_groups(groups) == 1
    samples = build_samples(groups)
    assert {s.task_id for s in samples} == {"t"} and {s.rollout_id for s in samples} == {"m0", "m1"}
    # the informative rollouts keep their full weight: 1/2 each, not 1/10 diluted by the tied group
    for rid in ("m0", "m1"):
        assert sum(w for s in samples if s.rollout_id == rid for w in s.token_weights) == pytest.approx(0.5)


def test_loss_aggregation_modes_by_verl_names():
    # rollout a: two segments (1 + 2 trained tokens); rollout b: one segment of 1 token
    a = _traj("a", 1.0, [_call(0, [1, 2], [3]), _call(1, [9, 9, 9], [5, 6])])
    b = _traj("b", 0.0, [_call(0, [1, 2], [7])])
    g = [TrajectoryGroup(task_id="t", trajectories=[a, b])]

    def weights(mode: str, **kw) -> list[list[float]]:
        return [[w for w in s.token_weights if w] for s in build_samples(g, loss_agg=mode, **kw)]

    assert weights("rollout-mean") == [pytest.approx([1 / 6]), pytest.approx([1 / 6, 1 / 6]), pytest.approx([1 / 2])]
    assert weights("token-mean") == [pytest.approx([1 / 4])] * 1 + [pytest.approx([1 / 4] * 2), pytest.approx([1 / 4])]
    # seq-mean-token-mean: each of the 3 segment rows weighs 1/3, spread over its tokens
    assert weights("seq-mean-token-mean") == [pytest.approx([1 / 3]), pytest.approx([1 / 6, 1 / 6]),
                                              pytest.approx([1 / 3])]
    # Dr. GRPO: one constant per token, 1 / (rows * loss_scale_tokens), whatever the lengths
    assert weights("seq-mean-token-sum-norm", loss_scale_tokens=100) == [
        pytest.approx([1 / 300]), pytest.approx([1 / 300] * 2), pytest.approx([1 / 300])]
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        build_samples(g, loss_agg="seq-mean-token-sum")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ clamp and dual-clip


def test_log_ratio_clamp_keeps_a_wild_token_finite():
    old = torch.tensor([[-100.0, -1.0]])
    new = torch.tensor([[-0.01, -1.0]], requires_grad=True)  # log-ratio ~100: exp overflows float32
    w = torch.tensor([[0.5, 0.5]])
    adv = torch.tensor([-1.0])
    loss, _ = policy_loss(new, old, adv, w, clip_ratio_c=None)
    assert math.isfinite(float(loss.detach()))
    assert float(loss.detach()) == pytest.approx(0.5 * math.exp(20.0) + 0.5, rel=1e-4)  # clamped at +20 before exp
    loss.backward()
    assert torch.isfinite(new.grad).all()


def test_dual_clip_caps_negative_advantage_loss():
    old = torch.tensor([[-3.0, -1.0, -1.0]])
    new = torch.tensor([[-1.0, -1.0, -0.5]], requires_grad=True)  # ratios e^2 = 7.39, 1, e^.5 = 1.65
    w = torch.tensor([[1 / 3, 1 / 3, 1 / 3]])
    adv = torch.tensor([-1.0])
    loss, m = policy_loss(new, old, adv, w, clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0)
    # token 0: max(7.39, 1.2) = 7.39 capped at c = 3; token 1: 1; token 2: max(1.65, 1.2) = 1.65 < 3
    assert float(loss.detach()) == pytest.approx((3.0 + 1.0 + math.exp(0.5)) / 3, rel=1e-5)
    assert m["pg_clipfrac_lower"] == pytest.approx(1 / 3)
    loss.backward()
    assert float(new.grad[0, 0]) == 0.0  # the dual-clipped token gets no gradient
    off, _ = policy_loss(new.detach(), old, adv, w, clip_low=0.2, clip_high=0.2, clip_ratio_c=None)
    assert float(off) == pytest.approx((math.exp(2.0) + 1.0 + math.exp(0.5)) / 3, rel=1e-5)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(new, old, adv, w, clip_ratio_c=0.5)


# ------------------------------------------------------------------------------ non-finite logprobs


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_logprob_is_refused_and_the_rollout_not_trained(bad):
    calls = [ModelCall(index=0, prompt_ids=[1, 2], output_ids=[3, 4, 5], output_logprobs=[-0.1, bad, -0.3])]
    with pytest.raises(NonFiniteLogprobError, match=r"call 0: output token 1 has logprob .* \(not finite\)"):
        build_segments(calls)
    t = Trajectory(rollout_id="nan", task_id="t", reward=1.0, calls=calls).build()
    assert t.status == RolloutStatus.INFRA_ERROR and not t.trainable and t.segments == [] and "not finite" in t.error
    assert t.calls == calls  # the recorded data is kept
    ok = _traj("ok", 0.0, [_call(0, [1, 2], [3])])
    ok2 = _traj("ok2", 1.0, [_call(0, [1, 2], [4])])
    samples = build_samples([TrajectoryGroup(task_id="t", trajectories=[t, ok, ok2])])
    assert {s.rollout_id for s in samples} == {"ok", "ok2"}
    # the validator refuses a hand-made segment carrying the NaN (it used to accept NaN == NaN)
    seg = Segment(input_ids=[1, 2, 3, 4, 5], loss_mask=[0, 0, 1, 1, 1], logprobs=[0.0, 0.0, -0.1, bad, -0.3],
                  call_indices=[0], break_reason=BreakReason.FIRST)
    with pytest.raises(SegmentValidationError, match="not finite"):
        validate_segments(calls, [seg])


# ------------------------------------------------------------------------------ KL reference


def _sample(ids: list[int], n_gen: int, adv: float, logp: list[float] | None = None):
    from openforge.train.grpo import TrainSample

    mask = [0] * (len(ids) - n_gen) + [1] * n_gen
    return TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=logp or [-4.0 * m for m in mask], advantage=adv,
                       token_weights=[m / (2 * n_gen) for m in mask])


def _state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_kl_reference_is_the_policy_grpo_starts_from_and_survives_resume(tiny_llama, tmp_path):
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    cfg = CPUTrainerConfig(lr=5e-2, kl_coef=0.5, micro_batch_tokens=16)
    trainer = CPUTrainer(tiny_llama, cfg)
    sft = _sample(list(range(10, 22)), 6, 0.0)
    sft.token_weights = [m / 6 for m in sft.loss_mask]
    for _ in range(3):  # the SFT warm-start moves the weights after the trainer was built
        trainer.step([sft], kind="sft")
    warm = _state(tiny_llama)
    grpo = [_sample(list(range(30, 40)), 4, 1.0), _sample(list(range(40, 52)), 5, -1.0)]
    m1 = trainer.step(grpo)
    # at the first GRPO step the policy *is* the reference: the KL to it is 0 (it was the pre-SFT
    # weights before, so the KL term pulled GRPO back toward a model that never calls tools)
    assert m1["ref_kl"] == pytest.approx(0.0, abs=1e-6)
    for k, v in trainer.ref_model.state_dict().items():
        assert torch.equal(v, warm[k]), k
    m2 = trainer.step(grpo)
    assert m2["ref_kl"] > 1e-6  # the policy moved away from the reference
    path = trainer.save(tmp_path / "ck")
    # resume into a fresh trainer whose module holds other weights: the reference is the
    # post-warm-start policy of the run it continues, not the checkpoint's or the fresh weights
    fresh = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(0.5)
    t2 = CPUTrainer(fresh, cfg)
    t2.load(path)
    for k, v in t2.ref_model.state_dict().items():
        assert torch.equal(v, warm[k]), k
    assert t2.step(grpo)["ref_kl"] == pytest.approx(trainer.step(grpo)["ref_kl"], rel=1e-4, abs=1e-7)


def test_reference_logprobs_once_per_step(tiny_llama):
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    trainer = CPUTrainer(tiny_llama, CPUTrainerConfig(kl_coef=0.1, ppo_epochs=3, micro_batch_tokens=12))
    trainer.set_reference()
    calls = {"ref": 0, "load_state_dict": 0}
    trainer.ref_model.get_decoder().register_forward_hook(lambda *a: calls.__setitem__("ref", calls["ref"] + 1))
    orig = tiny_llama.load_state_dict

    def counting(*a, **kw):
        calls["load_state_dict"] += 1
        return orig(*a, **kw)

    tiny_llama.load_state_dict = counting
    samples = [_sample(list(range(30, 40)), 4, 1.0), _sample(list(range(40, 50)), 5, -1.0)]
    m = trainer.step(samples)
    assert m["micro_batches"] == 2
    assert calls == {"ref": 2, "load_state_dict": 0}  # one reference pass per micro-batch, not per epoch


# ------------------------------------------------------------------------------ logprob pairing


async def test_logprob_pairing_through_the_proxy(tokenizer):
    """A real chat call through the proxy on a (tiny, random) model whose logprobs differ per token:
    every recorded behaviour logprob must land on the token it belongs to, all the way into the
    trainer's shifted target tensors (a one-token misalignment anywhere shows up here)."""
    import openai
    import transformers

    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.proxy.server import ProxyServer
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
    from openforge.train.logprobs import token_logprobs

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id)).eval()
    backend = TransformersBackend(model, tokenizer)
    trajs = []
    async with ProxyServer(backend, sampling={"temperature": 1.0, "max_tokens": 12}) as proxy:
        for i in range(2):
            h = proxy.create_rollout("t")
            c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            await c.chat.completions.create(model="x", messages=[{"role": "user", "content": f"count to {i + 3}"}])
            trajs.append(proxy.finish_rollout(h.rollout_id, reward=float(i)))
    seg = trajs[0].segments[0]
    lps = [lp for lp, m in zip(seg.logprobs, seg.loss_mask) if m]
    assert len({round(x, 3) for x in lps}) > 3  # per-token logprobs really differ
    ids = torch.tensor([seg.input_ids])
    with torch.no_grad():
        recomputed = token_logprobs(model, ids, torch.ones_like(ids))[0]
    for j, m in enumerate(seg.loss_mask):
        if m:  # position j-1 of the targets predicts token j
            assert float(recomputed[j - 1]) == pytest.approx(seg.logprobs[j], abs=1e-4), j
    samples = build_samples([TrajectoryGroup(task_id="t", trajectories=trajs)])
    trainer = CPUTrainer(model, CPUTrainerConfig(micro_batch_tokens=64))
    t = trainer._tensors(samples)
    with torch.no_grad():
        logp = token_logprobs(model, t["ids"], t["attn"])
    mask = t["w"] > 0
    assert int(mask.sum()) == sum(s.num_trained_tokens for s in samples)
    assert torch.allclose(logp[mask], t["old"][mask], atol=1e-4)
    assert trainer.step(samples)["behaviour_logprob_gap"] < 1e-4
