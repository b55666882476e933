"""The pod agent's OOM attribution (``_podagent.OomWatch``): a command that died by SIGKILL just as the
pod's memory cgroup counted an OOM kill reports it (``oom_kills``: the harness's death is then
``infra_error``, as a pod ``OOMKilled`` is); a kill counted long before its death does not (an agent
whose own command was OOM-killed earlier cannot pass a later kill of its harness off as one). The cgroup
counter is a file the test writes, in the format of cgroup v2's ``memory.events``."""

from __future__ import annotations

import threading
import time

import pytest

from openforge.launchers import _podagent

pytestmark = pytest.mark.timeout(60)


def _counter(path, n: int) -> None:
    path.write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {n}\n")


def _run_bumping(tmp_path, monkeypatch, *, bump_at_s: float, die_at_s: float) -> dict:
    events = tmp_path / "memory.events"
    _counter(events, 0)
    monkeypatch.setattr(_podagent, "OOM_EVENTS", (str(events),))
    bump = threading.Timer(bump_at_s, _counter, (events, 1))
    bump.start()
    try:
        return _podagent.run({"argv": ["sh", "-c", f"sleep {die_at_s}; kill -9 $$"], "timeout_s": 30}, {"PATH": "/usr/bin:/bin"})
    finally:
        bump.cancel()


def test_a_kill_counted_as_the_command_died_is_reported(tmp_path, monkeypatch):
    r = _run_bumping(tmp_path, monkeypatch, bump_at_s=0.5, die_at_s=0.8)
    assert r["returncode"] == -9
    assert r["oom_kills"] == 1


def test_a_kill_counted_long_before_the_death_is_not(tmp_path, monkeypatch):
    r = _run_bumping(tmp_path, monkeypatch, bump_at_s=0.2, die_at_s=_podagent.OOM_WINDOW_S + 1.5)
    assert r["returncode"] == -9
    assert r["oom_kills"] == 0


def test_no_counter_no_kills(tmp_path, monkeypatch):
    monkeypatch.setattr(_podagent, "OOM_EVENTS", (str(tmp_path / "absent"),))
    t0 = time.monotonic()
    r = _podagent.run({"argv": ["true"], "timeout_s": 30}, {"PATH": "/usr/bin:/bin"})
    assert r["returncode"] == 0 and r["oom_kills"] == 0
    assert time.monotonic() - t0 < 5
