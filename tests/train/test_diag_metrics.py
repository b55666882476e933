"""The trainer's GRPO diagnostics (``docs/metrics.md``, "GRPO diagnostics"): the clipped-ratio fraction,
the sampled-token entropy estimate and the per-step KL, on tiny tensors and a real CPU step."""

from __future__ import annotations

import pytest

from openforge.analysis.diagnose import DIAG_KEYS, step_diagnostics
from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall, RolloutStatus
from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
from openforge.train.grpo import build_samples, policy_loss
from openforge.train.logprobs import token_logprobs

torch = pytest.importorskip("torch")


def test_clip_fraction_counts_trained_tokens_where_the_clip_was_active():
    old = torch.zeros(1, 4)
    # ratios 1.0 (inside), 1.5 (above 1 + clip_high: clipped for A > 0), 0.5 (below: max keeps the
    # unclipped term for A > 0, so not active), 9.0 on an untrained token (not counted)
    new = torch.log(torch.tensor([[1.0, 1.5, 0.5, 9.0]]))
    w = torch.tensor([[1.0, 1.0, 1.0, 0.0]]) / 3
    _, m = policy_loss(new, old, torch.tensor([1.0]), w, clip_low=0.2, clip_high=0.28)
    assert m["pg_clipfrac"] == pytest.approx(1 / 3)
    _, m = policy_loss(new, old, torch.tensor([-1.0]), w, clip_low=0.2, clip_high=0.28, clip_ratio_c=None)
    assert m["pg_clipfrac"] == pytest.approx(1 / 3)  # A < 0: the 0.5 ratio is the clipped one


def _call(model, prompt: list[int], out: list[int]) -> ModelCall:
    ids = torch.tensor([prompt + out])
    with torch.no_grad():
        lp = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) - 1:].tolist()
    return ModelCall(index=0, prompt_ids=prompt, output_ids=out, output_logprobs=lp)


def _groups(model) -> list[TrajectoryGroup]:
    g = torch.Generator().manual_seed(3)
    groups = []
    for k, rewards in enumerate(([1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0])):
        trajs = []
        for i, r in enumerate(rewards):
            out = torch.randint(2, 96, (5 + i,), generator=g).tolist()
            trajs.append(Trajectory(rollout_id=f"r{k}{i}", task_id=f"t{k}", reward=r,
                                    status=RolloutStatus.SUCCESS if r else RolloutStatus.POLICY_FAILURE,
                                    calls=[_call(model, [5, 6, 7, 8 + i + k], out)]).build())
        groups.append(TrajectoryGroup(task_id=f"t{k}", trajectories=trajs))
    return groups


def test_entropy_estimate_is_the_mean_negative_logprob_of_trained_tokens(tiny_llama):
    groups = _groups(tiny_llama)
    samples = build_samples(groups)
    want = -sum(sum(s.old_logprobs[j] for j, m in enumerate(s.loss_mask) if m) for s in samples)
    want /= sum(s.num_trained_tokens for s in samples)
    m = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-12, micro_batch_tokens=16)).step(samples)
    assert m["entropy_est"] == pytest.approx(want, rel=1e-4)
    assert m["kl_step"] == pytest.approx(0.0, abs=1e-9)  # lr ~0: the policy did not move


def test_real_step_emits_every_diag_key(tiny_llama):
    groups = _groups(tiny_llama)
    m = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2, micro_batch_tokens=16)).step(build_samples(groups))
    assert m["kl_step"] > 1e-6  # a large step moved the policy on its own samples
    d = step_diagnostics(groups, m)
    assert set(d) == set(DIAG_KEYS) and all(isinstance(v, float) for v in d.values()), d
    assert d["diag/tied_share"] == 0.5 and d["diag/trained_tokens"] == m["trained_tokens"] > 0
    assert d["diag/grad_norm"] == m["grad_norm"] > 0
