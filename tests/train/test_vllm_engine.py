"""vLLM CPU as a training run's rollout engine, against the real server (``vllm`` marker; start it with
``scripts/vllm-server.sh start``, which enables runtime LoRA loading): the trainer's adapter is pushed after a
step, a call sampled by it records its version and carries the logprobs the trainer computes for the same
tokens; a one-step ``claw-grpo`` run with ``rollout.engine=vllm`` samples and trains on the served adapter."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

pytestmark = pytest.mark.vllm
torch = pytest.importorskip("torch")
pytest.importorskip("peft")

URL = os.environ.get("OPENFORGE_VLLM_URL", "http://127.0.0.1:18765/v1").rstrip("/").removesuffix("/v1")
LOGPROB_TOL = 2e-4  # vLLM's CPU build vs the trainer on the same fp32 weights (measured ~3e-5 without LoRA)


@pytest.fixture(scope="module")
def server() -> str:
    import httpx

    try:
        httpx.get(URL + "/v1/models", timeout=5).raise_for_status()
    except Exception as e:
        pytest.skip(f"no vLLM server at {URL} ({type(e).__name__}): start one with scripts/vllm-server.sh start")
    return URL


def _trainer_logprobs(model, prompt, out, temperature):
    from openforge.train.logprobs import token_logprobs

    ids = torch.tensor([prompt + out])
    with torch.no_grad():
        lp = token_logprobs(model, ids, torch.ones_like(ids), temperature=temperature)
    return lp[0, len(prompt) - 1:].tolist()


async def _sample(backend, prompt, temperature):
    from openforge.proxy.backends.base import GenContext, SamplingParams

    ctx = GenContext()
    gen = await backend.generate(prompt, SamplingParams(temperature=temperature, max_tokens=16), ctx)
    return gen, ctx.policy_version


def test_adapter_push_and_a_call_of_the_new_adapter(server, tmp_path):
    from openforge.config import CPUTrainerConfig, LoraConfig
    from openforge.proxy.backends.hf_loading import load_smollm2
    from openforge.proxy.backends.vllm import VLLMBackend
    from openforge.train.cpu import CPUTrainer
    from openforge.train.grpo import TrainSample
    from openforge.train.policy_sync import VLLMPolicy

    model, tok = load_smollm2()  # a fresh copy: the adapter is injected into it
    trainer = CPUTrainer(model, CPUTrainerConfig(lr=2e-2, lora=LoraConfig(rank=8, alpha=16.0)))
    text = tok.apply_chat_template([{"role": "user", "content": "Name a colour."}], add_generation_prompt=True,
                                   tokenize=False)
    prompt = tok.encode(text, add_special_tokens=False)

    async def go():
        backend = VLLMBackend(server + "?logprobs_mode=processed_logprobs", tokenizer=tok)
        policy = VLLMPolicy(backend, model, lora=True, work_dir=tmp_path / "pol")
        try:
            await policy.check_base("smollm2-135m")
            await policy.publish()  # version 0: the fresh adapter (B = 0: the base)
            gen, v = await _sample(backend, prompt, 0.7)
            assert v == 0
            ids = prompt + gen.output_ids
            mask = [0] * len(prompt) + [1] * len(gen.output_ids)
            sample = TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * len(prompt) + gen.logprobs,
                                 advantage=1.0, token_weights=[m / sum(mask) for m in mask])
            trainer.config.temperature = 0.7
            await asyncio.to_thread(trainer.step, [sample])
            dt = await policy.publish()  # version 1: the trained adapter
            gen1, v1 = await _sample(backend, prompt, 0.7)
            listed = [m["id"] for m in (await backend._request("GET", "/v1/models"))["data"]]
            return dt, gen1, v1, listed, policy.loaded
        finally:
            await policy.aclose()
            await backend.aclose()

    dt, gen1, v1, listed, name = asyncio.run(go())
    assert v1 == 1 and name.endswith("-v1") and name in listed
    assert not any(m.endswith("-v0") for m in listed)  # the previous adapter was unloaded
    assert dt < 5.0, f"adapter push took {dt:.2f}s"
    mine = _trainer_logprobs(model, prompt, gen1.output_ids, 0.7)
    gap = max(abs(a - b) for a, b in zip(mine, gen1.logprobs))
    assert gap < LOGPROB_TOL, f"vLLM's logprobs of the new adapter differ from the trainer's by {gap}"
    with model.__dict__["_openforge_peft"].disable_adapter():  # the adapter matters: the base differs
        base = _trainer_logprobs(model, prompt, gen1.output_ids, 0.7)
    assert max(abs(a - b) for a, b in zip(base, gen1.logprobs)) > 20 * LOGPROB_TOL
    print(f"adapter push {dt * 1000:.0f} ms, logprob gap {gap:.2e}")


@pytest.mark.heavy(minutes=4)  # ~1 min alone; 3.4 min measured beside 8 other jobs on 2 cores
def test_one_step_training_run_with_engine_vllm(server, tmp_path):
    """``claw-grpo --preset test`` with ``rollout.engine=vllm`` and a LoRA adapter: the rollouts sample on the
    server (version 0, the fresh adapter), the step trains on them with ratios ~1 (the server's logprobs are
    the trainer's), and the trained adapter is pushed as version 1."""
    from testdeps import smollm2_tokenizer

    from openforge.runner.forge import run
    from openforge.store import TrajectoryStore

    smollm2_tokenizer()
    d = tmp_path / "run"
    summary = run(recipe="claw-grpo", preset="test", progress=False, overrides=[
        f"run_dir={d}", "rollout.engine=vllm", f"rollout.vllm_url={server}?logprobs_mode=processed_logprobs",
        "rollout.vllm_start=false", "trainer.cpu.lora.rank=8", "sft.enabled=false",
        "trainer.cpu.max_resample_rounds=0", "rollout.tasks_per_step=1", "env.max_tasks=1"])
    assert summary["rollout_engine"].startswith(f"vllm at {server}")
    (step,) = summary["steps"]
    assert step["policy_version"] == 0 and step["stale_rollouts"] == 0
    assert step["train/trained_tokens"] > 0 and step["policy_push_s"] > 0
    assert step["train/behaviour_logprob_gap"] < 1e-3, step["train/behaviour_logprob_gap"]
    with TrajectoryStore(d / "trajectories.db") as store:
        calls = [c for t in store.trajectories() for c in t.calls if c.trainable]
    assert calls and {c.policy_version for c in calls} == {0}
    line = json.loads((d / "metrics.jsonl").read_text().splitlines()[-1])
    assert line["policy_version"] == 0


def test_full_weights_push_when_the_server_allows_it(server, tmp_path):
    """Without LoRA the whole weights are reloaded in place (the server needs OPENFORGE_VLLM_DEV_MODE=1; skipped
    otherwise): a call after the push carries the trained model's logprobs."""
    import httpx

    from openforge.config import CPUTrainerConfig
    from openforge.proxy.backends.hf_loading import load_smollm2
    from openforge.proxy.backends.vllm import VLLMBackend
    from openforge.train.cpu import CPUTrainer
    from openforge.train.grpo import TrainSample
    from openforge.train.policy_sync import VLLMPolicy

    if httpx.post(server + "/collective_rpc", json={"method": "no_such_method"}, timeout=30).status_code == 404:
        pytest.skip("the server runs without dev mode: OPENFORGE_VLLM_DEV_MODE=1 scripts/vllm-server.sh start")
    model, tok = load_smollm2()
    trainer = CPUTrainer(model, CPUTrainerConfig(lr=1e-4, temperature=1.0))
    prompt = tok.encode("The capital of France is", add_special_tokens=False)

    async def go():
        backend = VLLMBackend(server + "?logprobs_mode=processed_logprobs", tokenizer=tok)
        policy = VLLMPolicy(backend, model, lora=False, work_dir=tmp_path / "pol")
        try:
            await policy.publish()
            gen, _v = await _sample(backend, prompt, 1.0)
            ids = prompt + gen.output_ids
            mask = [0] * len(prompt) + [1] * len(gen.output_ids)
            await asyncio.to_thread(trainer.step, [TrainSample(
                input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * len(prompt) + gen.logprobs, advantage=1.0,
                token_weights=[m / sum(mask) for m in mask])])
            await policy.publish()
            return await _sample(backend, prompt, 1.0)
        finally:
            await policy.aclose()
            # the server keeps whatever was pushed last: give it back the base weights
            base, _ = load_smollm2()
            restore = VLLMBackend(server, tokenizer=tok)
            try:
                await VLLMPolicy(restore, base, lora=False, work_dir=tmp_path / "base").publish()
            finally:
                await restore.aclose()

    gen1, v1 = asyncio.run(go())
    assert v1 == 1
    mine = _trainer_logprobs(model, prompt, gen1.output_ids, 1.0)
    gap = max(abs(a - b) for a, b in zip(mine, gen1.logprobs))
    assert gap < LOGPROB_TOL, f"vLLM's logprobs after the full-weight reload differ from the trainer's by {gap}"
