"""Fixtures shared across test folders: ``rig`` — the real proxy (scripted policy), local
sandboxes and a store, for tests that run whole rollouts.

It also undoes an inherited "ignore SIGINT": a suite started in the background of a non-interactive
shell (``cmd &``, ``nohup``) gets SIGINT ignored, every process it starts inherits that, and the Ctrl-C
tests would then fail on how the suite was launched. A handled signal is reset to the default on exec,
so handling it here gives each child the disposition a user's terminal gives it.

CI's time budget for ``heavy`` tests is the ``ci_budget`` plugin (tests/ci_budget.py)."""

from __future__ import annotations

import signal

import pytest
from testdeps import smollm2_tokenizer

from openforge.launchers.local import LocalLauncher
from openforge.store import TrajectoryStore

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["ci_budget"]


@pytest.fixture
async def rig(tmp_path):
    """Returns a factory: rig(script, backend_cls=...) -> (proxy, launcher, store) inside the test's loop."""
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer

    tokenizer = smollm2_tokenizer()
    stack = []
    store = TrajectoryStore(tmp_path / "store.db")
    launcher = LocalLauncher(base_dir=tmp_path / "sbx", grace_s=1.0)

    async def make(script, backend_cls=ScriptedBackend):
        proxy = ProxyServer(backend_cls(script, tokenizer=tokenizer), store=store, uds=str(tmp_path / "p.sock"))
        await proxy.start()
        stack.append(proxy)
        return proxy, launcher, store

    yield make
    for p in stack:
        await p.stop()
    await launcher.aclose()
    store.close()
    assert not list((tmp_path / "sbx").iterdir()), "a sandbox dir was left behind"
