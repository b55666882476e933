"""veRL integration on CPU: our rows through veRL's own GRPO code, the composed Hydra config, the
dataset, and OpenForgeAgentLoop driven by a server_manager backed by a real transformers model.

The pure tests (rows, dataset, agent-loop YAML, refused objectives) run everywhere; the ones that run
veRL's own code take the ``verl`` fixture and skip with a reason when it is not installed
(pip install 'openforge[verl]')."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from testdeps import smollm2_tokenizer as load_smollm2_tokenizer

from openforge.config import load_config
from openforge.core.task import Task
from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall, RolloutStatus
from openforge.train.grpo import group_advantages
from openforge.train.verl.outputs import segment_rows


def _traj(rid: str, reward: float, calls: list[ModelCall], status=RolloutStatus.SUCCESS) -> Trajectory:
    return Trajectory(rollout_id=rid, task_id="t", reward=reward, status=status, calls=calls).build()


def _c(i: int, prompt: list[int], out: list[int]) -> ModelCall:
    return ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[-0.5] * len(out))


def test_segment_rows_split_prompt_and_response():
    # call 1 extends call 0 (one segment), call 2 rewrites history (second segment)
    t = _traj("a", 1.0, [_c(0, [1, 2, 3], [4, 5]), _c(1, [1, 2, 3, 4, 5, 6], [7]), _c(2, [9, 9], [8])])
    rows = segment_rows(t)
    assert len(rows) == 2
    assert rows[0]["prompt_ids"] == [1, 2, 3]
    assert rows[0]["response_ids"] == [4, 5, 6, 7]
    assert rows[0]["response_mask"] == [1, 1, 0, 1]
    assert rows[0]["response_logprobs"] == [-0.5, -0.5, 0.0, -0.5]
    assert rows[1]["prompt_ids"] == [9, 9] and rows[1]["response_mask"] == [1]  # final call's segment last


@pytest.fixture
def verl():
    """veRL itself, for the tests that run its code or compose its config (the rest are pure)."""
    return pytest.importorskip("verl", reason="verl not installed: pip install 'openforge[verl]' (verl==0.9.1)")


def test_rows_through_verl_grpo_match_ours(verl):
    import torch
    from verl.protocol import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from openforge.train.verl.outputs import to_agent_loop_outputs

    rewards = {"g1": [1.0, 0.0, 0.0, 1.0], "g2": [0.0, 0.0, 0.0, 1.0]}
    keys, fields = [], []
    for uid, rs in rewards.items():
        for sid, r in enumerate(rs):
            # session 0 of each group has two segments (a rewritten history)
            calls = [_c(0, [1, 2, 3], [4, 5, 6])]
            if sid == 0:
                calls.append(_c(1, [7, 7], [8, 9]))
            outs = to_agent_loop_outputs(_traj(f"{uid}-{sid}", r, calls), global_steps=3)
            assert outs[-1].extra_fields["reward_extra_info"]["acc"] == r
            assert all(o.extra_fields["min_global_steps"] == 3 for o in outs)
            for i, o in enumerate(outs):
                keys.append(f"{uid}_{sid}_{i}")
                fields.append((uid, o.as_dict(), r if i == len(outs) - 1 else None))
    # what veRL's worker does: copy the final reward to earlier rows, pad to a batch
    width = max(f["responses"].numel() for _, f, _ in fields)
    resp = torch.zeros(len(fields), width, dtype=torch.long)
    mask = torch.zeros(len(fields), width, dtype=torch.long)
    scores = torch.zeros(len(fields), width)
    for j, (uid, f, _) in enumerate(fields):
        n = f["responses"].numel()
        resp[j, :n] = f["responses"]
        mask[j, :n] = f["response_mask"]
        r = rewards[uid][int(keys[j].split("_")[1])]
        scores[j, n - 1] = r
    data = DataProto.from_dict(
        tensors={"responses": resp, "response_mask": mask, "token_level_rewards": scores},
        non_tensors={"uid": __import__("numpy").array([u for u, _, _ in fields], dtype=object)},
    )
    out = compute_advantage_for_multi_trajectories(data, keys, core_algos.AdvantageEstimator.GRPO)
    adv = out.batch["advantages"]
    for j, key in enumerate(keys):
        uid, sid, _ = key.split("_")
        want = group_advantages(rewards[uid])[int(sid)]
        got = adv[j][mask[j].bool()]
        assert torch.allclose(got, torch.full_like(got, want), atol=1e-4), key


def _gpu_launch(tmp_path):
    from openforge.train.verl.launch import launch

    cfg = load_config({"recipe": "claw-grpo"}, overrides=["trainer.backend=verl", "rollout.group_size=8",
                                                          "trainer.verl.n_gpus_per_node=8", "model.name=Qwen/Qwen3-8B",
                                                          "trainer.verl.loss_agg=token-mean"])
    tasks = [Task(id=f"t{i}", instruction=f"do {i}", environment="claw") for i in range(3)]
    res = launch(cfg, tmp_path / "run", tasks, dry_run=True)
    assert res["rc"] is None and res["command"][1:3] == ["-m", "verl.trainer.main_ppo"]
    return res


def test_dataset_and_agent_loop_yaml(tmp_path):
    """Pure: the parquet rows veRL reads and the agent-loop registry entry it instantiates."""
    import pyarrow.parquet as pq
    import yaml

    res = _gpu_launch(tmp_path)
    entries = yaml.safe_load(Path(res["agent_loop_config"]).read_text())
    assert entries[0]["name"] == "openforge"
    assert entries[0]["_target_"] == "openforge.train.verl.agent_loop.OpenForgeAgentLoop"
    rows = pq.read_table(res["train_file"]).to_pylist()
    assert [r["prompt"][0]["content"] for r in rows] == ["do 0", "do 1", "do 2"]
    assert Task.model_validate_json(rows[1]["extra_info"]["task"]).id == "t1"
    assert rows[0]["extra_info"]["group_size"] == 8


def test_composed_config(tmp_path, verl):
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    res = _gpu_launch(tmp_path)
    overrides = res["overrides"]
    cdir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(cdir), version_base=None):
        c = compose(config_name="ppo_trainer", overrides=overrides)
    assert c.algorithm.adv_estimator == "grpo" and c.trainer.use_v1 is True
    assert c.actor_rollout_ref.rollout.n == 8 and c.trainer.n_gpus_per_node == 8
    assert c.actor_rollout_ref.rollout.agent.default_agent_loop == "openforge"
    # a group failed by an infra error (every session raised: no trajectory) is refilled, not trained short
    assert c.trainer.v1.sampler.sync_refill_failed_groups is True
    assert c.actor_rollout_ref.rollout.val_kwargs.n == 1 and c.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    rollout = omega_conf_to_dataclass(c.actor_rollout_ref.rollout)  # veRL's own validation
    assert rollout.calculate_log_probs is True


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    verl = pytest.importorskip("verl", reason="verl not installed: pip install 'openforge[verl]' (verl==0.9.1)")
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_rollout_mean_is_refused_before_anything_is_written(tmp_path):
    """Pure: an objective veRL cannot optimise is refused by the launcher, in the config's terms."""
    from openforge.core.errors import ConfigError
    from openforge.train.verl.launch import launch

    tasks = [Task(id="t0", instruction="do", environment="claw")]
    base = ["trainer.backend=verl", "rollout.group_size=4"]
    with pytest.raises(ConfigError, match=r"trainer\.cpu\.loss_agg='rollout-mean' has no veRL equivalent"):
        launch(load_config({"recipe": "claw-grpo"}, overrides=base), tmp_path / "refused", tasks, dry_run=True)
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ConfigError, match=r"trainer\.verl\.loss_agg='rollout-mean'"):
        launch(load_config({"recipe": "claw-grpo"}, overrides=[*base, "trainer.verl.loss_agg=rollout-mean"]),
               tmp_path / "refused", tasks, dry_run=True)


def test_loss_agg_passes_through_to_verl(tmp_path, verl):
    from openforge.train.verl.launch import launch

    tasks = [Task(id="t0", instruction="do", environment="claw")]
    base = ["trainer.backend=verl", "rollout.group_size=4"]

    def agg(*extra: str):
        res = launch(load_config({"recipe": "claw-grpo"}, overrides=[*base, *extra]), tmp_path / "r", tasks,
                     dry_run=True)
        return _compose(res["overrides"]).actor_rollout_ref.actor

    # the CPU trainer's field is the default, so one config optimises one objective on both back-ends
    assert agg("trainer.cpu.loss_agg=token-mean").loss_agg_mode == "token-mean"
    assert agg("trainer.verl.loss_agg=seq-mean-token-mean").loss_agg_mode == "seq-mean-token-mean"
    actor = agg("trainer.verl.loss_agg=seq-mean-token-sum-norm", "trainer.verl.max_response_length=2048")
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm" and actor.loss_scale_factor == 2048  # a constant
    # the refill flag follows the config (and veRL accepts both values)
    res = launch(load_config({"recipe": "claw-grpo"}, overrides=[
        *base, "trainer.verl.loss_agg=token-mean", "trainer.verl.refill_failed_groups=false"]), tmp_path / "n", tasks,
        dry_run=True)
    assert _compose(res["overrides"]).trainer.v1.sampler.sync_refill_failed_groups is False


# ------------------------------------------------------------------ the agent loop itself

_RUNNER_FAIL: set[str] = set()
_GROUP_SEEDS: dict[str, object] = {}  # rollout id -> the group_seed its task carried


async def scripted_runner_factory(*, backend, max_tokens, **settings):
    """A test episode runner: two model calls through the veRL back-end, a rewritten second prompt,
    reward 1 if the task id ends in an even digit. Sessions whose rollout id is listed fail (infra)."""
    from openforge.proxy.backends.base import GenContext, SamplingParams

    async def run(task: Task, rollout_id: str) -> Trajectory:
        _GROUP_SEEDS[rollout_id] = task.metadata.get("group_seed")
        if any(rollout_id.startswith(p) for p in _RUNNER_FAIL):
            raise ConnectionError("sandbox died")
        params = SamplingParams(max_tokens=max_tokens)
        ctx = GenContext(rollout_id=rollout_id, task_id=task.id)
        g0 = await backend.generate([3, 4, 5], params, ctx)
        g1 = await backend.generate([3, 4, 5, *g0.output_ids, 6], params, ctx)
        calls = [ModelCall(index=0, prompt_ids=[3, 4, 5], output_ids=g0.output_ids, output_logprobs=g0.logprobs),
                 ModelCall(index=1, prompt_ids=[3, 4, 5, *g0.output_ids, 6], output_ids=g1.output_ids,
                           output_logprobs=g1.logprobs)]
        reward = float(int(task.id[-1]) % 2 == 0)
        return Trajectory(rollout_id=rollout_id, task_id=task.id, reward=reward, calls=calls,
                          status=RolloutStatus.SUCCESS if reward else RolloutStatus.POLICY_FAILURE).build()

    return run


class _HFServer:
    """server_manager stand-in answering like veRL's LLMServerClient, from a real HF model."""

    def __init__(self, model):
        from openforge.proxy.backends.transformers import TransformersBackend

        self.backend = TransformersBackend(model, tokenizer=None, seed=0)
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        from verl.workers.rollout.replica import TokenOutput

        from openforge.proxy.backends.base import SamplingParams

        self.calls.append((request_id, dict(sampling_params)))
        g = await self.backend.generate(prompt_ids, SamplingParams(temperature=sampling_params["temperature"],
                                                                   max_tokens=sampling_params["max_tokens"]))
        return TokenOutput(token_ids=g.output_ids, log_probs=g.logprobs, stop_reason="completed",
                           extra_fields={"global_steps": 5, "min_global_steps": 4, "max_global_steps": 5})


async def test_agent_loop_sessions_and_group_failure(tiny_llama, smollm2_tokenizer, verl):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from openforge.train.verl.agent_loop import OpenForgeAgentLoop

    server = _HFServer(tiny_llama)
    conf = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 2, "max_model_len": 200,
                                                               "prompt_length": 64, "response_length": 64}}})
    data_conf = OmegaConf.create({})

    def make():
        return OpenForgeAgentLoop(trainer_config=DictConfigWrap(conf), server_manager=server,
                                  tokenizer=smollm2_tokenizer, processor=None, dataset_cls=None,
                                  data_config=DictConfigWrap(data_conf), hf_model_type="llama",
                                  name="openforge", max_tokens=4,
                                  runner=f"{__name__}:scripted_runner_factory")

    def row(task_id: str) -> dict:
        t = Task(id=task_id, instruction="x", environment="claw")
        return {"extra_info": {"task": t.model_dump_json(), "group_size": 2}}

    sp = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    outs = await asyncio.gather(*[make().run(sp, uid="u1", session_id=s, global_steps=5, **row("t2"))
                                  for s in range(2)])
    for session in outs:
        assert len(session) == 1  # the second call extends the first: one merged segment
        o = session[0]
        assert o.reward_score == 1.0 and o.extra_fields["reward_extra_info"]["n_calls"] == 2.0
        assert (o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"]) == (4, 5)
        assert o.prompt_ids == [3, 4, 5] and o.response_mask[0] == 1 and 0 in o.response_mask
        assert len(o.response_logprobs) == len(o.response_ids)
        d = o.as_dict()
        assert float(d["rm_scores"][-1]) == 1.0
    # a group's sessions share its seed (the uid), so they draw the same faults; another group does not
    seeds = {rid.split("-")[0]: seed for rid, seed in _GROUP_SEEDS.items()}
    assert seeds == {"u1": "u1"} and len(_GROUP_SEEDS) == 2
    from openforge.faults.spec import FaultConfig, plan_faults

    faults = FaultConfig(fraction=0.5)
    t2 = Task(id="t2", instruction="x", environment="claw", metadata={"solution": ["cat a.txt"]})
    draws = {g: plan_faults(t2.model_copy(update={"metadata": {**t2.metadata, "group_seed": g}}), faults)
             for g in (f"u{i}" for i in range(12))}
    draws = {g: (faulty, tuple(f.kind for f in fs)) for g, (faulty, fs) in draws.items()}
    assert len(set(draws.values())) > 1  # other groups (other steps) get other faults
    rid, sp_sent = server.calls[0]
    assert rid.startswith("u1-")  # sticky routing key: the rollout id
    assert sp_sent["max_tokens"] == 4 and sp_sent["logprobs"] is True and sp_sent["temperature"] == 1.0

    # one infra failure fails every session of the group (veRL then refills it)
    _RUNNER_FAIL.add("u2-1-")
    try:
        res = await asyncio.gather(*[make().run(sp, uid="u2", session_id=s, global_steps=5, **row("t3"))
                                     for s in range(2)], return_exceptions=True)
    finally:
        _RUNNER_FAIL.clear()
    assert all(isinstance(r, RuntimeError) and "infra failure" in str(r) for r in res), res
    assert "sandbox died" in str(res[0])
    from openforge.train.verl import agent_loop as al

    assert "u1" not in al._GROUPS and "u2" not in al._GROUPS


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    return load_smollm2_tokenizer()


@pytest.mark.gpu
@pytest.mark.skipif(not os.environ.get("OPENFORGE_VERL_MODEL"), reason="set OPENFORGE_VERL_MODEL to a local HF model dir")
def test_verl_grpo_on_gpu(tmp_path):
    """One real veRL GRPO step: vLLM rollouts through the openforge proxy + react harness on claw."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from openforge.recipes import load_recipe_config
    from openforge.train.verl.launch import launch

    cfg = load_recipe_config("claw-grpo", preset="verl", overrides=[
        f"model.name={os.environ['OPENFORGE_VERL_MODEL']}", "trainer.steps=1", "trainer.verl.train_batch_size=2",
        "trainer.verl.ppo_mini_batch_size=2", "rollout.group_size=2", "trainer.verl.agent_workers=1"])
    from openforge.runner.forge import load_tasks

    res = launch(cfg, tmp_path, load_tasks(cfg))
    assert res["rc"] == 0


@pytest.mark.slow
async def test_agent_loop_real_rollout_through_proxy_and_react(smollm2, verl):
    """The default episode runner: openforge proxy in this process over VerlServerBackend, the react
    harness as a real process in a local sandbox, the claw verifier — driven by a server_manager that
    answers from SmolLM2 like veRL's LLMServerClient would."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from openforge.plugins import make_environment
    from openforge.train.verl import agent_loop as al
    from openforge.train.verl.agent_loop import OpenForgeAgentLoop

    model, tok = smollm2
    server = _HFServer(model)
    conf = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 2, "max_model_len": 4096}}})
    al._RUNTIMES.clear()
    task = make_environment("claw").task("files-create-hello")

    def make():
        return OpenForgeAgentLoop(trainer_config=DictConfigWrap(conf), server_manager=server, tokenizer=tok,
                                  processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})),
                                  hf_model_type="llama", name="openforge", max_tokens=24,
                                  harness_options={"max_turns": 1, "max_tokens": 24}, episode_timeout_s=180)

    sp = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    row = {"extra_info": {"task": task.model_dump_json(), "group_size": 2}}
    outs = await asyncio.gather(*[make().run(sp, uid="g", session_id=s, global_steps=1, **row) for s in range(2)])
    for session in outs:
        assert session and session[-1].reward_score in (0.0, 1.0)
        for o in session:
            assert sum(o.response_mask) > 0 and len(o.response_logprobs) == len(o.response_ids)
            assert o.response_mask[0] == 1
    assert server.calls and all(sp_["max_tokens"] <= 24 for _, sp_ in server.calls)
    al._RUNTIMES.clear()
