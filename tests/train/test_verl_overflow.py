"""A context overflow on the veRL path is the policy's failure, not an infrastructure error that
fails its whole group: ``OpenForgeAgentLoop`` (veRL's AgentLoopBase) with the default episode runner
(the openforge proxy over ``VerlServerBackend``, the react harness as a real process in a local
sandbox, the claw verifier), a group of two sessions, a server_manager answering like veRL's
``LLMServerClient`` (veRL's own ``TokenOutput``) from SmolLM2 through the transformers engine.

One session's policy runs a command whose output no longer fits ``max_model_len``: its next prompt
is refused by the proxy and recorded as a ``context_overflow`` call (never sent to the engine, where
it would come back as a 500 → ``infra_error`` → the whole group failed and refilled, never penalised).
The session is a ``policy_failure`` (trained, reward 0) and the group's other session is kept."""

from __future__ import annotations

import asyncio

import pytest

from openforge.core.types import CallStatus, RolloutStatus

pytest.importorskip("verl", reason="verl not installed: pip install 'openforge[verl]' (verl==0.9.1)")
pytest.importorskip("openai")

MAX_MODEL_LEN = 2048
FLOOD = "python3 -c \"print('word ' * 4000)\""  # ~4000 tokens of tool output: the next prompt cannot fit


class _Server:
    """server_manager stand-in answering like veRL's LLMServerClient from SmolLM2 (transformers). The
    first call of session 1 is the policy's command that floods its own context (scripted: an
    untrained 135M model does not reliably call tools); every other answer is SmolLM2's own."""

    def __init__(self, model, tokenizer):
        from openforge.proxy.backends.scripted import ScriptedBackend
        from openforge.proxy.backends.transformers import TransformersBackend

        self.engine = TransformersBackend(model, tokenizer=tokenizer, seed=0)
        self.script = ScriptedBackend({"turns": [{"shell": FLOOD}], "final": "Done."}, tokenizer=tokenizer)
        self.calls: list[tuple[str, int]] = []
        self.flooded: set[str] = set()

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        from verl.workers.rollout.replica import TokenOutput

        from openforge.proxy.backends.base import GenContext, SamplingParams

        self.calls.append((request_id, len(prompt_ids)))
        assert len(prompt_ids) < MAX_MODEL_LEN, "an over-long prompt reached the engine"
        params = SamplingParams(temperature=sampling_params["temperature"], max_tokens=sampling_params["max_tokens"])
        if request_id.split("-")[1] == "1" and request_id not in self.flooded:
            self.flooded.add(request_id)
            g = await self.script.generate(prompt_ids, params, GenContext(rollout_id=request_id, tools=_TOOLS))
        else:
            g = await self.engine.generate(prompt_ids, params)
        return TokenOutput(token_ids=g.output_ids, log_probs=g.logprobs, stop_reason="completed",
                           extra_fields={"min_global_steps": 1, "max_global_steps": 1})


_TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]


@pytest.mark.slow
async def test_an_overflow_on_the_verl_path_is_a_policy_failure_and_the_group_is_kept(smollm2):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from openforge.plugins import make_environment
    from openforge.train.verl import agent_loop as al
    from openforge.train.verl.agent_loop import OpenForgeAgentLoop

    model, tok = smollm2
    server = _Server(model, tok)
    conf = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 2, "max_model_len": MAX_MODEL_LEN}}})
    al._RUNTIMES.clear()
    task = make_environment("claw").task("files-create-hello")
    trajectories: dict = {}

    def make():
        return OpenForgeAgentLoop(trainer_config=DictConfigWrap(conf), server_manager=server, tokenizer=tok,
                                  processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})),
                                  hf_model_type="llama", name="openforge", max_tokens=48,
                                  harness_options={"max_turns": 2, "max_tokens": 48, "max_output": 100_000},
                                  episode_timeout_s=240)

    sp = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    row = {"extra_info": {"task": task.model_dump_json(), "group_size": 2}}
    try:
        loops = [make() for _ in range(2)]
        runner = await loops[0]._runner()  # the default runner, shared by the worker's sessions

        async def seen(task, rollout_id):  # the same runner; we keep a look at what it returned
            traj = await runner(task, rollout_id)
            trajectories[rollout_id.split("-")[1]] = traj
            return traj

        loops[0].runtime["runner"] = seen
        outs = await asyncio.gather(*[lp.run(sp, uid="g", session_id=s, global_steps=1, **row)
                                      for s, lp in enumerate(loops)])
    finally:
        al._RUNTIMES.clear()
    # both sessions came back (the group was not failed), each with trainable rows
    assert len(outs) == 2 and all(outs)
    for session in outs:
        for o in session:
            assert sum(o.response_mask) > 0 and len(o.response_logprobs) == len(o.response_ids)
    assert outs[1][-1].reward_score == 0.0
    assert all(n < MAX_MODEL_LEN for _, n in server.calls)  # nothing over-long reached the engine
    t1 = trajectories["1"]  # the flooded session: the overflow is a recorded call, the policy's failure
    assert t1.calls[-1].status == CallStatus.CONTEXT_OVERFLOW and len(t1.calls[-1].prompt_ids) >= MAX_MODEL_LEN
    assert t1.status == RolloutStatus.POLICY_FAILURE and t1.trainable and t1.reward == 0.0, (t1.status, t1.error)
    assert trajectories["0"].trainable  # the group's other rollout is kept
