"""The composition root: how one run is put together, in one place, for every caller.

Owns: :class:`Session` (an async context manager owning a run's back-end, proxy, store, launcher,
environment and harness factory, with the group runner, pause/resume and a teardown that cannot
leak on a partial start), :class:`ProxySettings` and :class:`RolloutSettings`. The parts it assembles are
built by name in :mod:`openforge.runner.parts` (``backend_for``, ``load_environment``, ...), the tasks are
chosen by :mod:`openforge.runner.task_selection`, and a veRL worker runs its rollouts through
:mod:`openforge.runner.worker_runtime`; the names of the first two are re-exported here.

This is the only module that constructs a :class:`~openforge.proxy.server.ProxyServer` outside
tests (``tests/core/test_layers.py`` checks it). Callers: the CPU trainer loop
(:mod:`openforge.runner.forge`), the SFT teacher (:mod:`openforge.runner.teacher`), ``forge eval``
(:mod:`openforge.runner.evaluation`), ``forge rollout``, ``forge proxy serve``, ``forge export sft`` and the
veRL agent-loop worker::

    async with Session(backend, environment=env, launcher=launcher, harness=factory,
                       store=run_dir / "trajectories.db") as s:
        groups = await s.groups(tasks, group_size=4)
        async with s.paused():          # no generation while the served weights change
            trainer.step(samples)

Start order: socket folder → store → launcher/environment (already built) → proxy; teardown runs
in reverse, through an :class:`contextlib.AsyncExitStack`, so whatever started before a failing
step is closed again (a proxy that cannot bind leaves no open store, launcher or socket folder).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.task import Task
from ..core.trajectory import Trajectory
from .harness_mix import PerGroupHarness
from .parts import (  # re-exported: callers import the run's parts from the session module
    backend_for,
    each_harness,
    group_harnesses,
    harness_factory,
    load_environment,
    load_launcher,
    reference_script,
)
from .rollout import GroupRequest, GroupResults, RolloutRequest, run_groups, run_rollout
from .seams import RolloutProxy
from .task_selection import select_tasks

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..environment import Environment
    from ..harness import Harness
    from ..launchers.base import Launcher
    from ..proxy.backends.base import Backend, SamplingParams
    from ..proxy.server import ProxyServer
    from ..store import TrajectoryStore

__all__ = ["ProxySettings", "RolloutSettings", "Session", "backend_for", "each_harness", "group_harnesses",
           "harness_factory", "load_environment", "load_launcher", "reference_script", "select_tasks"]


# ------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class ProxySettings:
    """How the session's proxy listens and samples (see :class:`~openforge.proxy.server.ProxyServer`).
    Sandboxes without a network reach it on a Unix socket in the session's private socket folder."""

    host: str | None = "127.0.0.1"
    port: int = 0
    uds: str | None = None  # an extra all-routes Unix socket (``forge proxy serve --uds``)
    admin_token: str | None = None
    public_url: str | None = None
    sampling: SamplingParams | Mapping[str, Any] | None = None
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    train_calls: str = "harness"  # rollout.train_calls: harness | all (openforge.core.call_origin)


@dataclass(frozen=True)
class RolloutSettings:
    """What every rollout of the session shares."""

    concurrency: int = 2
    budget_s: float | None = None  # default: each task's timeout_s
    progress: bool = True
    model: str = "openforge-policy"
    success_threshold: float = 1.0
    extra: Mapping[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------ session


class Session:
    """One run's wiring: ``backend`` served by a proxy this session builds, trajectories into
    ``store`` (a path: opened and closed here; a store object: borrowed), sandboxes from ``launcher``
    (closed here; told on start to hide the run's own files from every sandbox: the store's run
    directory, every task's hidden paths and the task root, the cache, and ``hidden``), tasks set up and verified by ``environment``, a fresh harness per rollout from
    ``harness``. ``close_backend``: the back-end is this session's to close too. Environment,
    launcher and harness may be left out by a caller that only serves (``forge proxy serve``)."""

    def __init__(self, backend: Backend, *, environment: Environment | None = None,
                 launcher: Launcher | None = None, harness: Callable[[], Harness] | None = None,
                 store: TrajectoryStore | str | os.PathLike[str] | None = None,
                 proxy: ProxySettings | None = None, rollouts: RolloutSettings | None = None,
                 close_backend: bool = False, hidden: Sequence[str | os.PathLike[str]] = ()):
        self.backend = backend
        self.environment = environment
        self.launcher = launcher
        self.harness = harness
        self._store_spec = store
        self.store: TrajectoryStore | None = None
        self.proxy_settings = proxy or ProxySettings()
        self.rollout_settings = rollouts or RolloutSettings()
        self.close_backend = close_backend
        self.hidden = list(hidden)  # more host paths no sandbox may show (the run's cache root)
        self._proxy: ProxyServer | None = None
        self._sockdir: str | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> Session:
        """Bring every part up in order; on any failure close what came up and re-raise."""
        if self._stack is not None:
            raise RuntimeError("this session is already started")
        stack = contextlib.AsyncExitStack()
        try:
            await self._start(stack)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        if self.close_backend:
            stack.push_async_callback(self.backend.aclose)
        self._sockdir = tempfile.mkdtemp(prefix="openforge-")
        stack.callback(shutil.rmtree, self._sockdir, True)
        self.store = self._open_store(stack)
        if self.launcher is not None:
            self.launcher.hide(self._project_paths())
            stack.push_async_callback(self.launcher.aclose)
        self._proxy = await self._start_proxy(self.backend, "policy", stack, self.proxy_settings)

    def _project_paths(self) -> list[str]:
        """The run directory and stores, every task's hidden paths and the task root, the cache
        (:func:`~openforge.runner.project_paths.project_paths`): hidden from every sandbox."""
        from ..util.paths import cache_root
        from .project_paths import project_paths

        store = self.store.path if self.store is not None else None
        return project_paths(store=store, environment=self.environment, extra=[cache_root(), *self.hidden])

    def _open_store(self, stack: contextlib.AsyncExitStack) -> TrajectoryStore | None:
        spec = self._store_spec
        if spec is None or not isinstance(spec, (str, os.PathLike)):
            return spec  # none, or borrowed: its owner closes it
        from ..store import TrajectoryStore

        store = TrajectoryStore(spec)
        stack.callback(store.close)
        return store

    async def _start_proxy(self, backend: Backend, name: str, stack: contextlib.AsyncExitStack,
                           settings: ProxySettings, *, keep: bool = True) -> ProxyServer:
        """The one construction site of :class:`ProxyServer` outside tests (``keep``: log to the
        session's store)."""
        from ..proxy.bounds import ProxyTimeouts
        from ..proxy.server import ProxyServer

        assert self._sockdir is not None
        proxy = ProxyServer(backend, store=self.store if keep else None, host=settings.host, port=settings.port, uds=settings.uds,
                            agent_uds=os.path.join(self._sockdir, f"{name}.sock"),
                            admin_token=settings.admin_token, public_url=settings.public_url,
                            sampling=dict(settings.sampling) if isinstance(settings.sampling, Mapping)
                            else settings.sampling,
                            timeouts=ProxyTimeouts(header_s=settings.header_timeout_s, body_s=settings.body_timeout_s),
                            train_calls=settings.train_calls)
        await proxy.start()  # closes its own listeners when it fails
        stack.push_async_callback(proxy.stop)
        return proxy

    async def close(self) -> None:
        """Tear everything down in reverse start order. Idempotent."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        self._proxy = None

    async def __aenter__(self) -> Session:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- parts -----------------------------------------------------------------------------------
    @property
    def proxy(self) -> ProxyServer:
        if self._proxy is None:
            raise RuntimeError("the session is not started (use `async with Session(...)` or `await start()`)")
        return self._proxy

    @contextlib.asynccontextmanager
    async def side_proxy(self, backend: Backend, name: str, *,
                         sampling: SamplingParams | Mapping[str, Any] | None = None,
                         keep: bool = True) -> AsyncIterator[ProxyServer]:
        """A second proxy over ``backend`` (e.g. an SFT teacher) sharing this session's launcher,
        environment and harness — and its store unless ``keep=False`` (e.g. a held-out evaluation
        that must not land among the run's trajectories); loopback only, stopped on exit."""
        async with contextlib.AsyncExitStack() as stack:
            yield await self._start_proxy(backend, name, stack, ProxySettings(sampling=sampling), keep=keep)

    async def pause(self) -> None:
        """New calls wait; returns when calls in flight are done (safe to change weights). The back-end's
        caches go (:meth:`~openforge.proxy.backends.base.Backend.release_caches`): a pause is for training."""
        await self.proxy.pause()
        self.backend.release_caches()

    async def resume(self) -> None:
        await self.proxy.resume()

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """``pause()`` … ``resume()``, resumed even when the body raises."""
        await self.pause()
        try:
            yield
        finally:
            await self.resume()

    def _require(self) -> tuple[Environment, Launcher, Callable[[], Harness]]:
        if self.environment is None or self.launcher is None or self.harness is None:
            raise ConfigError("this session only serves: it has no environment, launcher or harness to run rollouts")
        return self.environment, self.launcher, self.harness

    # -- running ---------------------------------------------------------------------------------
    async def groups(self, tasks: Sequence[Task], group_size: int, *, min_group: int = 2, max_retries: int = 2,
                     proxy: RolloutProxy | None = None, environment: Environment | None = None,
                     harness: PerGroupHarness | None = None, seed: int | None = None,
                     keep: bool = True) -> GroupResults:
        """``group_size`` rollouts of each task (see :func:`~openforge.runner.rollout.run_groups`), through
        ``proxy`` (default: the session's) and ``environment`` (default: the session's; e.g. a teacher's
        fault-free view of it); ``harness`` picks each group's harness (a multi-harness step; default:
        the session's for every group); ``seed`` seeds each group's ``group_seed``; ``keep=False``:
        nothing goes to the session's store."""
        env, launcher, default = self._require()
        rs = self.rollout_settings
        return await run_groups(GroupRequest(
            tasks=list(tasks), group_size=group_size, concurrency=rs.concurrency, harness=harness or default,
            environment=environment or env, launcher=launcher, proxy=proxy or self.proxy,
            store=self.store if keep else None,
            max_retries=max_retries, min_group=min_group, budget_s=rs.budget_s, progress=rs.progress,
            model=rs.model, success_threshold=rs.success_threshold, seed=seed))

    async def rollout(self, task: Task, *, rollout_id: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Trajectory:
        """One rollout of ``task`` (``rollout_id`` names the proxy's rollout; default: fresh)."""
        env, launcher, harness = self._require()
        rs = self.rollout_settings
        return await run_rollout(RolloutRequest(
            task=task, harness=harness(), environment=env, launcher=launcher, proxy=self.proxy, store=self.store,
            budget_s=rs.budget_s, model=rs.model, metadata=dict(metadata or {}),
            success_threshold=rs.success_threshold, rollout_id=rollout_id))

    # -- building from names / a run config --------------------------------------------------------
    @classmethod
    def from_names(cls, backend: Backend, *, environment: str | Path | Environment,
                   harness: str, launcher: str = "local", harness_options: Mapping[str, Any] | None = None,
                   launcher_options: Mapping[str, Any] | None = None,
                   environment_options: Mapping[str, Any] | None = None, **kw: Any) -> Session:
        """A session whose environment, launcher and harness are looked up by their registered names."""
        env = load_environment(environment, environment_options)
        make = harness_factory(harness, harness_options)
        return cls(backend, environment=env, harness=make, launcher=load_launcher(launcher, launcher_options), **kw)

    @classmethod
    def from_config(cls, cfg: RunConfig, backend: Backend, *, store: TrajectoryStore | str | os.PathLike[str] | None,
                    environment: Environment | None = None, progress: bool = True,
                    close_backend: bool = False) -> Session:
        """The session of a training run's config (its sampling, concurrency and budget)."""
        from ..util.paths import cache_root

        env = environment or load_environment(cfg.env.name, cfg.env.options)
        first = cfg.harness.names()[0]  # a multi-harness run picks each group's through groups(harness=...)
        make = harness_factory(first, cfg.harness.options_for(first))
        return cls(backend, environment=env, harness=make, launcher=load_launcher(cfg.launcher.name, cfg.launcher.options),
                   store=store,
                   proxy=ProxySettings(sampling={"temperature": cfg.rollout.temperature,
                                                 "max_tokens": cfg.rollout.max_tokens},
                                         train_calls=cfg.rollout.train_calls),
                   rollouts=RolloutSettings(concurrency=cfg.rollout.concurrency, budget_s=cfg.rollout.timeout_s,
                                            progress=progress), close_backend=close_backend,
                   hidden=[cache_root(cfg.cache_dir)])
