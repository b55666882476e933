"""A tool script in the sandbox that calls the policy through the proxy URL in its environment: its
call is labelled ``foreign`` and not trained by default (``rollout.train_calls: harness``), trained
with ``all``. The real react harness, proxy (scripted policy), local sandbox and claw environment."""

from __future__ import annotations

import pytest

from openforge.config import RolloutConfig
from openforge.core.call_origin import label_origins, tool_names
from openforge.core.errors import ConfigError
from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall
from openforge.core.types import RolloutStatus as S
from openforge.envs.claw import ClawEnvironment, reference_solution
from openforge.runner.rollout import run_rollout

pytest.importorskip("openai")
ENV = ClawEnvironment()
TASK = "files-create-hello"
#: What the policy's tool script does: call the model through the rollout's own proxy URL and key.
TOOL_SCRIPT = ("curl -s -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: application/json' "
               "-d '{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2?\"}]}' "
               "\"${OPENAI_BASE_URL%/}/chat/completions\" > answer.json; grep -c choices answer.json")
SCRIPT = {"turns": [{"shell": TOOL_SCRIPT},           # the harness's call 0: run the script
                    {"text": "four"},                 # call 1: the script's own call, answered
                    *({"shell": c} for c in reference_solution(TASK)),
                    {"tool": {"name": "finish", "arguments": {"answer": "done"}}}]}


def react():
    from openforge.harnesses.react import ReactHarness

    return ReactHarness(max_turns=6)


async def _rollout(rig, train_calls: str | None) -> Trajectory:
    from openforge.proxy.server import ProxyServer

    proxy, launcher, store = await rig(SCRIPT)
    if train_calls is not None:  # a second proxy as a session makes it for rollout.train_calls=all
        other = ProxyServer(proxy.backend, store=store, uds=None, train_calls=train_calls)
        await other.start()
        try:
            return await run_rollout(harness=react(), environment=ENV, task=ENV.task(TASK), launcher=launcher,
                                     proxy=other, store=store)
        finally:
            await other.stop()
    return await run_rollout(harness=react(), environment=ENV, task=ENV.task(TASK), launcher=launcher,
                             proxy=proxy, store=store)


def _trained(traj: Trajectory) -> set[int]:
    return {i for s in traj.segments for i in s.call_indices}


async def test_a_tool_scripts_call_is_labelled_and_not_trained_by_default(rig):
    traj = await _rollout(rig, None)
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    origins = [c.origin for c in traj.calls]
    assert origins[1] == "foreign" and origins.count("foreign") == 1, origins
    assert traj.calls[1].request["messages"][0]["content"] == "What is 2+2?"  # it is the script's call
    assert 1 not in _trained(traj) and {0, 2} <= _trained(traj), [s.call_indices for s in traj.segments]
    assert traj.metrics["skipped_calls"] == {"1": "foreign"} and traj.metrics["foreign_calls"] == [1]
    again = Trajectory.from_json(traj.to_json())  # the label is in the stored trajectory
    assert again.calls[1].origin == "foreign"


async def test_train_calls_all_trains_the_tool_scripts_call(rig):
    traj = await _rollout(rig, "all")
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert traj.calls[1].origin == "foreign"  # labelled either way
    assert 1 in _trained(traj) and "1" not in traj.metrics["skipped_calls"]


def test_train_calls_is_checked():
    assert RolloutConfig().train_calls == "harness"
    assert RolloutConfig(train_calls="all").train_calls == "all"
    with pytest.raises(ValueError, match="train_calls"):
        RolloutConfig(train_calls="tools")
    from openforge.proxy.recorder import Recorder

    with pytest.raises(ConfigError, match=r"rollout\.train_calls must be one of harness, all"):
        Recorder(train_calls="some")


def _call(i: int, prompt: list[int], *, sys_len: int, tools: list[str] = (), api: str = "chat") -> ModelCall:
    if api == "chat":
        request = {"tools": [{"type": "function", "function": {"name": n}} for n in tools]}
    elif api == "messages":
        request = {"tools": [{"name": n, "input_schema": {}} for n in tools]}
    else:
        request = {"tools": [{"functionDeclarations": [{"name": n} for n in tools]}]}
    return ModelCall(index=i, api="chat" if api == "gemini" else api, request=request, prompt_ids=prompt,
                     output_ids=[9], output_logprobs=[-0.5], system_prefix_len=sys_len)


@pytest.mark.parametrize("api", ["chat", "messages", "gemini"])
def test_the_rule(api):
    """Continuations, branches of the agent prefix and sub-agents (calls with tools) are the
    harness's; a fresh conversation with another prefix and no tools is foreign."""
    calls = [
        _call(0, [1, 2, 3, 4], sys_len=2, tools=["bash", "read"], api=api),        # the harness
        _call(1, [7, 8, 5], sys_len=2, api=api),                                   # a script: own prompt, no tools
        _call(2, [1, 2, 3, 4, 9, 6], sys_len=2, tools=["bash", "read"], api=api),  # continues call 0
        _call(3, [1, 2, 30], sys_len=2, tools=["bash", "read"], api=api),          # history rewritten: same prefix
        _call(4, [40, 41, 42], sys_len=2, tools=["web"], api=api),                 # a sub-agent: tools of its own
        _call(5, [40, 41, 42, 9, 43], sys_len=2, api=api),                         # continues the sub-agent
        _call(6, [40, 41, 60], sys_len=2, api=api),                                # the sub-agent's prefix again
        _call(7, [50, 51, 52], sys_len=2, api=api),                                # another script's call
        _call(8, [7, 8, 5, 9, 1], sys_len=2, api=api),                             # continues a foreign call
    ]
    assert label_origins(calls) == {0: "harness", 1: "foreign", 2: "harness", 3: "harness", 4: "harness",
                                    5: "harness", 6: "harness", 7: "foreign", 8: "foreign"}
    assert tool_names(calls[0].request) == {"bash", "read"}


def test_no_fingerprint_no_label():
    """A first call with no agent prefix and no tools leaves nothing to tell the harness by: all harness."""
    calls = [_call(0, [1, 2], sys_len=0), _call(1, [7, 8], sys_len=0)]
    assert label_origins(calls) == {0: "harness", 1: "harness"}
