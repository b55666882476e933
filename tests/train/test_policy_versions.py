"""Policy versions (:mod:`openforge.train.policy_sync`): every call the proxy serves records the version of
the policy that sampled it, the trainer refuses a rollout holding a call of another version (never trained as
on-policy), the in-process engine counts versions, and ``rollout.engine=vllm`` falls back to transformers,
saying why, where vLLM cannot run."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall, RolloutStatus
from openforge.train.grpo import build_samples, count_stale, group_advantages
from openforge.train.policy_sync import InProcessPolicy, open_engine


def _traj(rid: str, reward: float, versions: list[int | None]) -> Trajectory:
    calls = [ModelCall(index=i, prompt_ids=[1, 2, 3 + i], output_ids=[4, 5], output_logprobs=[-1.0, -1.0],
                       policy_version=v) for i, v in enumerate(versions)]
    return Trajectory(rollout_id=rid, task_id="t", reward=reward, status=RolloutStatus.SUCCESS, calls=calls).build()


def test_a_stale_call_is_never_trained_as_on_policy(caplog):
    fresh = [_traj("a", 1.0, [3, 3]), _traj("b", 0.0, [3]), _traj("c", 0.0, [3])]
    stale = _traj("old", 1.0, [3, 2])  # its second call was sampled by version 2: an older adapter
    unknown = _traj("nov", 1.0, [None])  # a back-end that did not say which version sampled it
    g = TrajectoryGroup(task_id="t", trajectories=[*fresh, stale, unknown])
    with caplog.at_level(logging.WARNING, logger="openforge.train"):
        samples = build_samples([g], policy_version=3)
    assert {s.rollout_id for s in samples} == {"a", "b", "c"}
    adv = dict(zip("abc", group_advantages([1.0, 0.0, 0.0])))  # the baseline is the fresh rollouts' alone
    assert all(s.advantage == pytest.approx(adv[s.rollout_id]) for s in samples)
    assert "call(s) [1] were sampled by policy version 2, not 3" in caplog.text
    assert count_stale([g], 3) == 2
    # an unversioned step (a caller that names no version) trains them all, as before versions existed
    assert {s.rollout_id for s in build_samples([g])} == {"a", "b", "c", "old", "nov"}


def test_the_proxy_records_the_version_that_sampled_each_call(tokenizer):
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer

    async def go():
        backend = ScriptedBackend({"turns": ["one", "two", "three"]}, tokenizer=tokenizer)
        proxy = ProxyServer(backend)
        h = proxy.create_rollout("t")
        hdr = {"x-api-key": h.api_key}
        body = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
            for v in (None, 0, 7):
                backend.policy_version = v
                r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=body, headers=hdr)
                assert r.status_code == 200, r.text
        return proxy.finish_rollout(h.rollout_id, reward=1.0)

    traj = asyncio.run(go())
    assert [c.policy_version for c in traj.calls] == [None, 0, 7]
    again = Trajectory.from_json(traj.to_json())  # the trajectory JSON carries it; older JSON reads as None
    assert [c.policy_version for c in again.calls] == [None, 0, 7]
    old = traj.model_dump(mode="json")
    for c in old["calls"]:
        del c["policy_version"]
    assert Trajectory.model_validate(old).calls[0].policy_version is None


def test_in_process_engine_counts_versions():
    class Backend:
        model = object()
        policy_version = None

    class Trainer:
        model = Backend.model
        published = 0

        async def publish(self, backend):
            self.published += 1

    b, t = Backend(), Trainer()
    p = InProcessPolicy(b, t)

    async def go():
        for _ in range(3):
            await p.publish()

    asyncio.run(go())
    assert (p.version, b.policy_version, t.published) == (2, 2, 3)


def test_vllm_engine_falls_back_to_transformers_saying_why():
    # no server at this loopback port, and the run may not start one
    c = open_engine("vllm", "http://127.0.0.1:9/?logprobs_mode=processed_logprobs", start=False)
    assert c.engine == "transformers" and "no vLLM server answers at http://127.0.0.1:9/" in c.note
    assert "samples with the transformers back-end instead" in c.note
    # the project's probe says this machine cannot run vLLM's CPU build (exit 3): its reason is passed on
    calls = []

    def script(cmd, timeout_s):
        calls.append(cmd)
        return (3, "cannot run here: the CPU lacks AVX2") if cmd == "probe" else (0, "")

    c = open_engine("vllm", "http://127.0.0.1:9", start=True, script=script, answers=lambda url: False)
    assert c.engine == "transformers" and "the CPU lacks AVX2" in c.note and calls == ["probe"]
    # a server that does not come up after start: the same fallback, with the script's last word
    c = open_engine("vllm", "http://127.0.0.1:9", start=True, answers=lambda url: False,
                    script=lambda cmd, t: (1, "the vLLM server exited; see server.log") if cmd == "start" else (0, ""))
    assert c.engine == "transformers" and "start failed (exit 1): the vLLM server exited" in c.note
    # started by the run: used, and stopped at its end
    seen = iter([False, True])
    c = open_engine("vllm", "http://127.0.0.1:9", start=True, answers=lambda url: next(seen),
                    script=lambda cmd, t: (0, "ready"))
    assert c.engine == "vllm" and c.started_server
    assert open_engine("transformers", "http://127.0.0.1:9", start=True).engine == "transformers"
