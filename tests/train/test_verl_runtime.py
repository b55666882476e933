"""The veRL agent-loop runtime of one worker process, through the default episode runner: the real
openforge proxy over VerlServerBackend, an in-process harness speaking to it with the real openai
SDK, a verifier. veRL's LLMServerClient is the one stand-in (it needs Ray and GPUs): it answers
with fixed tokens as veRL's ``TokenOutput`` and records what it was asked.

Guarantees: the session's rollout id is the proxy's rollout id, so each session's own sampling
(training or validation) reaches veRL; a validation row's barrier waits for val_kwargs.n sessions,
not rollout.n; a worker running hundreds of sessions keeps nothing of the finished ones."""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from testdeps import smollm2_tokenizer

from openforge.core.task import Task
from openforge.environment import Environment, VerifyResult
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers.base import Launcher, Sandbox, SandboxSpec

NEEDS_VERL = "verl not installed: pip install 'openforge[verl]' (verl==0.9.1)"

TRAIN_SP = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
VAL_SP = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


class ChatTwice(Harness):
    """A harness that makes two chat calls through the real openai SDK (in this process)."""

    name = "chat-twice"
    http: Any = None  # one connection pool for all sessions (a client's TLS set-up costs ~0.15 s)

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        import openai

        c = openai.AsyncOpenAI(base_url=ctx.openai_base_url, api_key=ctx.api_key, max_retries=0, http_client=self.http)
        msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": ctx.task.instruction}]
        r = await c.chat.completions.create(model=ctx.model, messages=msgs)
        msgs += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                 {"role": "user", "content": "And again?"}]
        r = await c.chat.completions.create(model=ctx.model, messages=msgs)
        return HarnessResult(exit_code=0, final_text=r.choices[0].message.content)


class HostSandbox(Sandbox):
    """A temp dir on the host; the in-process harness reaches the proxy at its host URL."""

    def __init__(self, spec: SandboxSpec):
        self.workdir = self.home = Path(tempfile.mkdtemp(prefix="of-host-"))
        self.proxy_url = spec.proxy_url.rstrip("/")

    async def exec(self, argv, *, env=None, cwd=None, timeout_s=None, stdin=None):
        raise NotImplementedError("the in-process harness runs no process")

    async def read_file(self, path):
        return (self.workdir / path).read_bytes()

    async def write_file(self, path, data, mode=0o644):
        (self.workdir / path).write_bytes(data)

    async def close(self):
        shutil.rmtree(self.workdir, ignore_errors=True)


class HostLauncher(Launcher):
    name = "host"

    async def start(self, spec: SandboxSpec) -> Sandbox:
        return HostSandbox(spec)


class EvenIds(Environment):
    """Reward 1 when the task id ends in an even digit."""

    name = "even-ids"

    def tasks(self, split=None):
        return [Task(id=f"t{i}", instruction=f"task {i}", environment=self.name) for i in range(4)]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=float(int(task.id[-1]) % 2 == 0))


class FixedServer:
    """veRL's LLMServerClient stand-in: answers "ok" + end of turn as a ``TokenOutput`` and keeps
    (request_id, sampling_params) of each call."""

    def __init__(self, tokenizer, *, keep: bool = True):
        pytest.importorskip("verl", reason=NEEDS_VERL)
        self.answer = [*tokenizer.encode("ok", add_special_tokens=False), tokenizer.eos_token_id]
        self.calls: list[tuple[str, dict]] = []
        self.keep, self.n_calls = keep, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        from verl.workers.rollout.replica import TokenOutput

        self.n_calls += 1
        if self.keep:
            self.calls.append((request_id, dict(sampling_params)))
        await asyncio.sleep(0)
        return TokenOutput(token_ids=list(self.answer), log_probs=[-0.5] * len(self.answer), stop_reason="completed",
                           extra_fields={"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3})


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture
async def loop_factory(tokenizer):
    """make(server, n=..., timeout=...) -> a new OpenForgeAgentLoop (one per session, as veRL does)."""
    pytest.importorskip("verl", reason=NEEDS_VERL)
    pytest.importorskip("openai")
    import openai
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from openforge.train.verl import agent_loop as al

    al._RUNTIMES.clear()
    ChatTwice.http = openai.DefaultAsyncHttpxClient()

    def make(server, *, n: int = 2, episode_timeout_s: float = 60.0):
        conf = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": n, "max_model_len": 2048}}})
        return al.OpenForgeAgentLoop(
            trainer_config=DictConfigWrap(conf), server_manager=server, tokenizer=tokenizer, processor=None,
            dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})), hf_model_type="llama",
            name="openforge", max_tokens=8, episode_timeout_s=episode_timeout_s,
            harness=f"{__name__}:ChatTwice", launcher=f"{__name__}:HostLauncher", environment=f"{__name__}:EvenIds")

    yield make
    al._RUNTIMES.clear()
    await ChatTwice.http.aclose()


def test_options_from_verl_yaml_reach_the_runner_as_plain_containers(tokenizer):
    """veRL builds the agent loop from its YAML through OmegaConf: nested options arrive as DictConfig and
    ListConfig, which an environment checking ``dict`` refused (a whole veRL run of generated claw tasks
    failed as infra errors). The loop hands plain dicts and lists on."""
    pytest.importorskip("verl", reason=NEEDS_VERL)
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from openforge.train.verl import agent_loop as al

    yaml_kwargs = OmegaConf.create({"environment_options": {"generated": {"train": 8, "families": ["git-tag"]}},
                                    "harness_options": {"max_turns": 2}, "launcher_options": {"ro_binds": ["/x"]}})
    conf = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 2, "max_model_len": 2048}}})
    loop = al.OpenForgeAgentLoop(
        trainer_config=DictConfigWrap(conf), server_manager=FixedServer(tokenizer), tokenizer=tokenizer,
        processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})), hf_model_type="llama",
        name="openforge", rollout_timeout_s=900, **yaml_kwargs)
    al._RUNTIMES.clear()
    s = loop.settings
    assert s["rollout_timeout_s"] == 900.0
    assert s["environment_options"] == {"generated": {"train": 8, "families": ["git-tag"]}}
    assert type(s["environment_options"]["generated"]) is dict
    assert type(s["environment_options"]["generated"]["families"]) is list
    assert type(s["launcher_options"]["ro_binds"]) is list and type(s["harness_options"]) is dict


async def test_the_rollout_budget_reaches_the_worker_session(monkeypatch):
    """``rollout.timeout_s`` (the ``verl`` preset's 900 s) is each rollout's budget in the veRL worker too;
    before, the worker ran every rollout on the task's own budget (claw: 180 s) and a slow CPU replica's
    rollouts were killed as infra errors."""
    from openforge.recipes import load_recipe_config
    from openforge.runner import worker_runtime
    from openforge.train.verl.launch import agent_loop_entries

    cfg = load_recipe_config("claw-grpo", preset="verl", overrides=["rollout.timeout_s=900"])
    entry = agent_loop_entries(cfg)[0]
    assert entry["rollout_timeout_s"] == 900
    seen = {}

    class FakeSession:
        @classmethod
        def from_names(cls, backend, **kw):
            seen.update(kw)
            return cls()

        async def start(self):
            pass

    monkeypatch.setattr(worker_runtime, "Session", FakeSession)
    keys = ("max_tokens", "harness", "harness_options", "launcher", "launcher_options", "environment",
            "environment_options", "rollout_timeout_s")
    await worker_runtime.episode_runner(backend=None, **{k: entry[k] for k in keys})
    assert seen["rollouts"].budget_s == 900


def _row(task_id: str, group_size: int) -> dict:
    t = Task(id=task_id, instruction=f"do {task_id}", environment="even-ids")
    return {"extra_info": {"task": t.model_dump_json(), "group_size": group_size}}


async def test_session_rollout_id_and_its_own_sampling_reach_veRL(loop_factory, tokenizer):
    """A training group (temperature 1) and a validation row (val_kwargs: temperature 0) run at once in
    one worker: every call is routed by its session's rollout id and sampled with its session's params."""
    server = FixedServer(tokenizer)
    train = [loop_factory(server).run(TRAIN_SP, uid="utrain", session_id=s, global_steps=3, **_row("t2", 2))
             for s in range(2)]
    val = loop_factory(server).run(VAL_SP, uid="uval", session_id=0, global_steps=3, **_row("t4", 1))
    outs = await asyncio.wait_for(asyncio.gather(*train, val), 60)
    assert all(o[-1].reward_score == 1.0 for o in outs)
    assert len(server.calls) == 6  # two calls per session
    for rid, sp in server.calls:
        assert rid.startswith(("utrain-0-", "utrain-1-", "uval-0-")), rid  # veRL's id, not one the proxy minted
        assert sp["temperature"] == (0.0 if rid.startswith("uval-") else 1.0), (rid, sp)
        assert sp["max_tokens"] <= 8 and sp["logprobs"] is True
    assert len({rid for rid, _ in server.calls}) == 3  # each session one sticky routing key


async def test_call_for_a_rollout_never_opened_is_refused(tokenizer):
    from openforge.core.errors import BackendError
    from openforge.proxy.backends.base import GenContext, SamplingParams
    from openforge.train.verl.backend import VerlServerBackend

    server = FixedServer(tokenizer)
    b = VerlServerBackend(server, tokenizer, max_model_len=64)
    b.open_rollout("a-0-x", VAL_SP)
    with pytest.raises(BackendError, match="no veRL sampling params"):
        await b.generate([1, 2], SamplingParams(max_tokens=4), GenContext(rollout_id="ro_minted"))
    g = await b.generate([1, 2], SamplingParams(max_tokens=4), GenContext(rollout_id="a-0-x"))
    assert g.output_ids and server.calls == [("a-0-x", {**VAL_SP, "max_tokens": 4})]
    assert b.close_rollout("a-0-x") == (3, 3) and not b._sampling and not b.steps


async def test_validation_row_barrier_waits_for_val_n_not_group_size(loop_factory, tokenizer, tmp_path):
    """The launcher's validation rows say how many sessions veRL starts for them (val_kwargs.n = 1 here,
    rollout.n = 4): the single session returns at once instead of waiting for 3 that never come."""
    import pyarrow.parquet as pq

    from openforge.config import load_config
    from openforge.train.verl.launch import launch

    cfg = load_config({"recipe": "claw-grpo"}, overrides=[
        "trainer.backend=verl", "rollout.group_size=4", "trainer.verl.val_group_size=1", "trainer.verl.loss_agg=token-mean"])
    tasks = [Task(id="t0", instruction="do t0", environment="even-ids")]
    res = launch(cfg, tmp_path / "run", tasks, dry_run=True)
    val_row = pq.read_table(tmp_path / "run" / "verl" / "val.parquet").to_pylist()[0]
    assert val_row["__rollout_n__"] == 1 and val_row["extra_info"]["group_size"] == 1  # veRL's n and ours agree
    assert "actor_rollout_ref.rollout.val_kwargs.n=1" in res["command"]
    train_row = pq.read_table(res["train_file"]).to_pylist()[0]
    assert train_row["extra_info"]["group_size"] == 4 and "__rollout_n__" not in train_row

    server = FixedServer(tokenizer)
    loop = loop_factory(server, n=4, episode_timeout_s=30)  # a wrong barrier would wait 30 + 60 s
    t0 = asyncio.get_running_loop().time()
    outs = await asyncio.wait_for(loop.run(VAL_SP, uid="v1", session_id=0, global_steps=3,
                                           extra_info=val_row["extra_info"]), 20)
    assert outs[-1].reward_score == 1.0 and asyncio.get_running_loop().time() - t0 < 20


async def test_worker_memory_stays_flat_over_many_sessions(loop_factory, tokenizer):
    """240 sessions (120 groups of 2) in one worker: after a 40-session warm-up the next 200 leave no
    rollout, sampling entry, weight-version entry or barrier behind, and no live Python objects."""
    from openforge.train.verl import agent_loop as al

    server = FixedServer(tokenizer, keep=False)

    async def groups(first: int, count: int, wave: int = 4) -> None:
        for g0 in range(first, first + count, wave):
            await asyncio.gather(*[
                loop_factory(server).run(TRAIN_SP, uid=f"g{g}", session_id=s, global_steps=3, **_row(f"t{g % 4}", 2))
                for g in range(g0, min(g0 + wave, first + count)) for s in range(2)])

    # veRL warns once per session ("No model-specific Continuous Token builder ..."), and pytest's log
    # capture keeps every record: that is the test harness holding objects, not the worker
    verl_log = logging.getLogger("verl")
    level, verl_log.level = verl_log.level, logging.ERROR
    try:
        await _sessions_leave_nothing(groups, al, server)
    finally:
        verl_log.setLevel(level)


async def _sessions_leave_nothing(groups, al, server) -> None:
    def live_objects() -> int:
        gc.collect()
        return len(gc.get_objects())

    await groups(0, 20)  # warm-up: caches, connection pools, lazily built parts
    runtime = next(iter(al._RUNTIMES.values()))
    proxy = runtime["runner"].proxy
    before = live_objects()
    await groups(20, 100)
    after = live_objects()
    assert server.n_calls == 2 * 2 * 120
    per_session = (after - before) / 200
    print(f"live objects: {before} after warm-up, {after} after 200 more sessions ({per_session:.2f}/session)")
    held = {"proxy rollouts": len(proxy.recorder.rollouts), "sampling": len(runtime["backend"]._sampling),
            "weight versions": len(runtime["backend"].steps), "barriers": len(al._GROUPS)}
    assert held == dict.fromkeys(held, 0), held
    assert per_session < 1, f"{per_session:.1f} objects retained per finished session"
