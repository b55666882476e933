"""The composition root: a Session wires back-end → proxy → store → launcher → environment → harness,
runs real rollouts through it, and tears down whatever started even when a later part fails to."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from testdeps import smollm2_tokenizer

from openforge.core.errors import ConfigError, StoreError
from openforge.core.task import Task
from openforge.core.trajectory import Trajectory
from openforge.core.types import RolloutStatus
from openforge.envs.claw import ClawEnvironment
from openforge.harnesses.react import ReactHarness
from openforge.launchers.local import LocalLauncher
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.runner.rollout import GroupRequest, RolloutRequest, run_rollout
from openforge.runner.seams import RolloutProxy, TrajectorySink
from openforge.runner.session import ProxySettings, Session, backend_for, select_tasks
from openforge.store import TrajectoryStore

ENV = ClawEnvironment()


class CountingLauncher(LocalLauncher):
    """The real local launcher, counting how often it is closed."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1
        await super().aclose()


class CountingBackend(ScriptedBackend):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1
        await super().aclose()


def _traj() -> Trajectory:
    return Trajectory(rollout_id="r", task_id="t", status=RolloutStatus.SUCCESS, reward=1.0)


async def test_a_part_that_fails_to_start_leaves_nothing_of_the_earlier_ones_open(tmp_path):
    """The proxy (the last part) cannot bind its port: the store, launcher, back-end and socket
    folder that came up before it are all closed again, and the error is the caller's."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    launcher = CountingLauncher(base_dir=tmp_path / "sbx")
    backend = CountingBackend({"turns": [{"text": "hi"}]}, tokenizer=smollm2_tokenizer())
    session = Session(backend, environment=ENV, launcher=launcher, harness=ReactHarness,
                      store=tmp_path / "store.db", proxy=ProxySettings(port=port), close_backend=True)
    try:
        with pytest.raises(OSError):
            await session.start()
    finally:
        held.close()
    assert session.store is not None
    with pytest.raises(StoreError, match="closed"):
        session.store.put_trajectory(_traj())  # the store it opened is closed
    assert launcher.closed == 1 and backend.closed == 1
    assert session._sockdir is not None and not Path(session._sockdir).exists()
    with pytest.raises(RuntimeError, match="not started"):
        session.proxy  # noqa: B018
    await session.close()  # idempotent after a failed start
    assert launcher.closed == 1


async def test_a_borrowed_store_stays_open_and_teardown_is_reverse_and_complete(tmp_path):
    store = TrajectoryStore(tmp_path / "mine.db")
    launcher = CountingLauncher(base_dir=tmp_path / "sbx")
    backend = CountingBackend({"turns": [{"text": "hi"}]}, tokenizer=smollm2_tokenizer())
    async with Session(backend, environment=ENV, launcher=launcher, harness=ReactHarness, store=store) as s:
        sockdir = Path(s._sockdir)
        assert Path(s.proxy.agent_uds).parent == sockdir and Path(s.proxy.agent_uds).is_socket()
    assert launcher.closed == 1 and backend.closed == 0  # the caller's back-end stays the caller's
    assert not sockdir.exists()
    store.put_trajectory(_traj())  # borrowed: its owner closes it
    store.close()


async def test_session_runs_real_rollouts_and_a_side_proxy_shares_its_store(tmp_path):
    """The reference back-end through the real react harness: one rollout on the session's proxy,
    then a group on a second (teacher) proxy; both land in the session's one store."""
    task = ENV.task("files-create-hello")
    backend = backend_for("reference", environment=ENV, tasks=[task], tokenizer=smollm2_tokenizer())
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    async with Session(backend, environment=ENV, launcher=launcher, harness=ReactHarness,
                       store=tmp_path / "store.db") as s:
        traj = await s.rollout(task, rollout_id="named-1")
        assert traj.rollout_id == "named-1" and traj.status == RolloutStatus.SUCCESS, traj.error
        teacher = backend_for("reference", environment=ENV, tasks=[task], tokenizer=smollm2_tokenizer())
        async with s.side_proxy(teacher, "teacher") as tp:
            assert tp is not s.proxy and tp.agent_uds != s.proxy.agent_uds
            groups = await s.groups([task], 1, min_group=1, proxy=tp)
        assert groups[0].trajectories[0].status == RolloutStatus.SUCCESS
        stored = {t.rollout_id for t in s.store.trajectories()}
        assert {"named-1", groups[0].trajectories[0].rollout_id} <= stored
    assert not list((tmp_path / "sbx").iterdir())


async def test_a_serving_session_refuses_rollouts(tmp_path):
    backend = ScriptedBackend({"turns": [{"text": "hi"}]}, tokenizer=smollm2_tokenizer())
    async with Session(backend) as s:
        with pytest.raises(ConfigError, match="only serves"):
            await s.rollout(ENV.task("files-create-hello"))


def test_the_proxy_and_store_satisfy_the_orchestrator_seams(tmp_path):
    from openforge.proxy.server import ProxyServer

    proxy = ProxyServer(ScriptedBackend({"turns": []}, tokenizer=smollm2_tokenizer()), token_workers=0)
    store = TrajectoryStore(tmp_path / "s.db")
    try:
        assert isinstance(proxy, RolloutProxy) and isinstance(store, TrajectorySink)
        assert not isinstance(object(), RolloutProxy)
    finally:
        store.close()


async def test_requests_are_value_objects():
    task = ENV.task("files-create-hello")
    req = RolloutRequest(task=task, harness=ReactHarness(), environment=ENV, launcher=LocalLauncher(), proxy=None)
    with pytest.raises(TypeError, match="not both"):
        await run_rollout(req, task=task)
    with pytest.raises(TypeError):
        RolloutRequest(task=task, harness=ReactHarness(), environment=ENV, launcher=LocalLauncher(), proxy=None,
                       budget=3)  # a misspelt field is refused, not ignored
    g = GroupRequest(tasks=[task], group_size=2, concurrency=1, harness=ReactHarness, environment=ENV,
                     launcher=LocalLauncher(), proxy=None, budget_s=5.0)
    one = g.rollout(task, 0, {"slot": 1})
    assert one.budget_s == 5.0 and one.metadata == {"slot": 1} and isinstance(one.harness, ReactHarness)
    assert g.rollout(task, 0, {}).harness is not one.harness  # a fresh harness per member


def test_one_task_selection_rule():
    easy = select_tasks(ENV, split="train", subset="easy")
    assert easy and all(t.split == "train" for t in easy)
    assert select_tasks(ENV, split="train", max_tasks=2) == ENV.tasks("train")[:2]
    ids = [ENV.tasks()[1].id, ENV.tasks()[0].id]
    assert [t.id for t in select_tasks(ENV, split=None, task_ids=ids)] == ids
    with pytest.raises(ConfigError, match="has no task 'nope'"):
        select_tasks(ENV, split="train", task_ids=["nope"])
    with pytest.raises(ConfigError, match="no-such-subset"):
        select_tasks(ENV, split="train", subset="no-such-subset")
    with pytest.raises(ConfigError, match="no tasks"):
        select_tasks(ENV, split="no-such-split")


def test_reference_backend_needs_a_solution():
    class NoSolutions(ClawEnvironment):
        def reference_solution(self, task: Task) -> list[str] | None:
            return None

    with pytest.raises(ConfigError, match="reference solution"):
        backend_for("reference", environment=NoSolutions(), tasks=ENV.tasks()[:2])
    with pytest.raises(ConfigError, match="environment"):
        backend_for("reference", tasks=[])


def test_export_sft_loads_no_policy_model(tmp_path, monkeypatch):
    """`forge export sft` runs its teacher through a session of its own: no policy model, no optimizer."""
    from typer.testing import CliRunner

    import openforge.proxy.backends.transformers as tf
    from openforge.cli.main import app

    def refuse(*a, **kw):
        raise AssertionError("export sft loaded a policy model")

    monkeypatch.setattr(tf, "load_model", refuse)
    out = tmp_path / "teacher.jsonl"
    r = CliRunner().invoke(app, ["export", "sft", str(out), "--subset", "easy", "--max-tasks", "1",
                                 "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 0, f"{r.output}\n{r.exception!r}"
    row = json.loads(out.read_text().splitlines()[0])
    assert row["messages"][0]["role"] == "system" and row["reward"] == 1.0
    assert (tmp_path / "run" / "trajectories.db").is_file() and (tmp_path / "run" / "config.yaml").is_file()
