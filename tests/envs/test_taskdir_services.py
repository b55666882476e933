"""Task-dir ``[[services]]``: real host processes on ``$PORT``, reached from inside real sandboxes at
``${NAME}_URL``, read by the verifier, logged, stopped; a service that fails is an ``env_error``."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from openforge.core.errors import EnvironmentError_
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

#: A counter service: GET /health, POST /hit (counts, stored in ./count.json), GET /env (what it was given).
COUNTER = """
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from pathlib import Path

    class H(BaseHTTPRequestHandler):
        def reply(self, obj, code=200):
            body = json.dumps(obj).encode()
            self.send_response(code); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            if self.path == "/health":
                return self.reply({"ok": True}, int(os.environ.get("HEALTH_CODE", "200")))
            if self.path == "/env":
                return self.reply({"port": os.environ["PORT"], "cwd": os.getcwd(),
                                   "service_dir": os.environ["OPENFORGE_SERVICE_DIR"],
                                   "task_dir": os.environ["OPENFORGE_TASK_DIR"],
                                   "admin": os.environ.get("OPENFORGE_ADMIN_TOKEN")})
            if self.path == "/crash":
                os._exit(3)
            self.reply({"error": "no route"}, 404)
        def do_POST(self):
            f = Path("count.json")
            n = json.loads(f.read_text()) + 1 if f.exists() else 1
            f.write_text(json.dumps(n))
            print(f"hit {n}", flush=True)
            self.reply({"count": n})

    HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""

VERIFY = """
    import json, os, pathlib, urllib.request
    f = pathlib.Path(os.environ["OPENFORGE_SERVICE_DIR"]) / "count.json"
    n = json.loads(f.read_text()) if f.exists() else 0
    env = json.load(urllib.request.urlopen(os.environ["COUNTER_URL"] + "/env", timeout=5))
    print(json.dumps({"reward": float(n >= 2), "subscores": {"hits": n}, "service_env": env}))
"""


def make_task(root, *, command="python3 $OPENFORGE_TASK_DIR/services/counter.py", ready='"/health"', extra=""):
    d = root / "svc-task"
    (d / "services").mkdir(parents=True)
    (d / "services" / "counter.py").write_text(textwrap.dedent(COUNTER))
    (d / "task.toml").write_text(f'[[services]]\nname = "counter"\ncommand = "{command}"\n'
                                 + (f"ready = {ready}\n" if ready else "") + extra)
    (d / "instruction.md").write_text("Hit the counter at $COUNTER_URL once more.\n")
    # setup.sh runs after the service is up and sees its URL: the first hit
    (d / "setup.sh").write_text('curl -fsS -X POST "$COUNTER_URL/hit" > first-hit.json\n')
    (d / "solution.sh").write_text('curl -fsS -X POST "$COUNTER_URL/hit"\n')
    (d / "verify.py").write_text(textwrap.dedent(VERIFY))
    return d


@pytest.fixture
async def launcher(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    yield la
    await la.aclose()


async def _start(env, launcher, rid="svc"):
    task = env.tasks()[0]
    sbx = await launcher.start(SandboxSpec(rollout_id=rid, task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    return task, sbx


async def test_service_lifecycle(tmp_path, launcher):
    d = make_task(tmp_path / "tasks")
    env = TaskDirEnvironment(d, log_dir=tmp_path / "logs")
    task, sbx = await _start(env, launcher, "svc-life")
    try:
        await env.setup(task, sbx)
        group = env._services[id(sbx)]
        [svc] = group.running
        assert json.loads((sbx.workdir / "first-hit.json").read_text()) == {"count": 1}, "started before setup.sh"
        url = env.harness_env(task, sbx)["COUNTER_URL"]
        r = await sbx.exec(["bash", "-c", env.reference_solution(task)[0]], env=env.harness_env(task, sbx))
        assert r.returncode == 0 and json.loads(r.stdout) == {"count": 2}, (url, r.stderr)
        res = await env.verify(task, sbx)
        assert res.reward == 1.0 and res.rewards == {"hits": 2.0}
        seen = res.metadata["service_env"]
        assert seen["port"] == str(svc.host_port) and seen["cwd"] == seen["service_dir"] == str(group.state_dir)
        assert seen["task_dir"] == str(d.resolve()) and seen["admin"] is None
        if launcher.isolation != "none":  # inside the sandbox: its own loopback, not the service's port
            assert url != svc.host_url
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
    assert svc.proc.poll() is not None, "the service is stopped after the rollout"
    assert not group.state_dir.exists()
    log = (tmp_path / "logs" / "svc-life-counter.log").read_text()
    assert "hit 1" in log and "hit 2" in log


async def test_a_no_op_agent_scores_zero(tmp_path, launcher):
    env = TaskDirEnvironment(make_task(tmp_path / "tasks"), log_dir=tmp_path / "logs")
    task, sbx = await _start(env, launcher)
    try:
        await env.setup(task, sbx)
        assert (await env.verify(task, sbx)).reward == 0.0
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


@pytest.mark.parametrize(("kw", "message"), [
    ({"command": "echo broken config >&2; exit 7"}, "exited (exit 7) before it was ready"),
    ({"command": "sleep 60", "extra": "ready_timeout_s = 1\n"}, "was not ready within 1s (GET /health did not answer"),
    ({"command": "HEALTH_CODE=503 python3 $OPENFORGE_TASK_DIR/services/counter.py", "extra": "ready_timeout_s = 1\n"},
     "was not ready within 1s"),
    ({"command": "sleep 60", "ready": None, "extra": "ready_timeout_s = 1\n"}, "did not accept"),
])
async def test_a_service_that_does_not_start_is_an_env_error(tmp_path, launcher, kw, message):
    env = TaskDirEnvironment(make_task(tmp_path / "tasks", **kw), log_dir=tmp_path / "logs")
    task, sbx = await _start(env, launcher)
    try:
        with pytest.raises(EnvironmentError_, match="service 'counter'") as e:
            await env.setup(task, sbx)
        assert message in str(e.value)
        if "exit 7" in message:
            assert "broken config" in str(e.value), "the error carries the service's log"
        group = env._services[id(sbx)]
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
    assert not group.running and not group.state_dir.exists()


async def test_a_service_the_agent_crashed_is_the_policys_failure(tmp_path, launcher):
    from openforge.core.types import RolloutStatus
    from openforge.envs.services import ServiceCrashed

    env = TaskDirEnvironment(make_task(tmp_path / "tasks"), log_dir=tmp_path / "logs")
    task, sbx = await _start(env, launcher)
    try:
        await env.setup(task, sbx)
        await sbx.exec(["bash", "-c", 'curl -s "$COUNTER_URL/crash"; true'], env=env.harness_env(task, sbx))
        with pytest.raises(ServiceCrashed, match=r"service 'counter' exited \(exit 3\) after the agent's requests") as e:
            await env.verify(task, sbx)
        assert e.value.status == RolloutStatus.POLICY_FAILURE
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def test_service_env_has_no_driver_secrets(tmp_path, launcher, monkeypatch):
    monkeypatch.setenv("OPENFORGE_ADMIN_TOKEN", "secret-admin")
    env = TaskDirEnvironment(make_task(tmp_path / "tasks"), log_dir=tmp_path / "logs")
    task, sbx = await _start(env, launcher)
    try:
        await env.setup(task, sbx)
        await sbx.exec(["bash", "-c", 'curl -fsS -X POST "$COUNTER_URL/hit"'], env=env.harness_env(task, sbx))
        assert (await env.verify(task, sbx)).metadata["service_env"]["admin"] is None
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def test_a_wrapper_sits_in_front_of_a_service(tmp_path, launcher):
    """The seam fault injection uses: the sandbox reaches whatever ``ServiceWrapper.wrap`` returns."""
    import asyncio

    class Recorder:  # a one-request-per-connection HTTP relay that records what passes
        def __init__(self):
            self.seen, self.servers, self.calls = [], {}, []

        async def wrap(self, svc, task, rollout_id):
            self.calls.append(("wrap", svc.spec.name, task.id, rollout_id))

            async def handle(r, w):
                data = await r.read(65536)
                self.seen.append(data)
                ur, uw = await asyncio.open_connection("127.0.0.1", svc.host_port)
                uw.write(data)
                await uw.drain()
                w.write(await ur.read())  # the whole response: the HTTP/1.0 service closes after it
                await w.drain()
                w.close()
                uw.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.servers[svc.spec.name] = server
            return server.sockets[0].getsockname()[1]

        async def unwrap(self, svc):
            self.calls.append(("unwrap", svc.spec.name, svc.proc.poll() is None))
            self.servers.pop(svc.spec.name).close()

    rec = Recorder()
    env = TaskDirEnvironment(make_task(tmp_path / "tasks"), log_dir=tmp_path / "logs", service_wrapper=rec)
    task, sbx = await _start(env, launcher, "wrapped")
    try:
        await env.setup(task, sbx)
        assert any(b"POST /hit" in s for s in rec.seen), "setup.sh went through the wrapper"
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
    assert rec.calls == [("wrap", "counter", "svc-task", "wrapped"), ("unwrap", "counter", True)]
    assert not rec.servers


async def test_a_setup_cut_off_by_its_budget_leaves_no_service_running(tmp_path, launcher):
    import asyncio

    env = TaskDirEnvironment(make_task(tmp_path / "tasks", command="sleep 60", extra="ready_timeout_s = 30\n"),
                             log_dir=tmp_path / "logs")
    task, sbx = await _start(env, launcher)
    try:
        with pytest.raises(asyncio.TimeoutError):  # run_rollout's setup_timeout_s, as it cuts setup off
            await asyncio.wait_for(env.setup(task, sbx), 1)
        [svc] = env._services[id(sbx)].running
        assert svc.proc.poll() is None
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
    assert svc.proc.poll() is not None, "teardown stops a service that never got ready"


DRIVER = """
import asyncio, json, sys
from pathlib import Path
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

async def main():
    env = TaskDirEnvironment(sys.argv[1], log_dir=sys.argv[2])
    la = LocalLauncher(base_dir=sys.argv[3])
    task = env.tasks()[0]
    sbx = await la.start(SandboxSpec(rollout_id="orphan", task=task, proxy_url="", api_key="k"))
    await env.setup(task, sbx)
    group = env._services[id(sbx)]
    print(json.dumps({"pid": group.running[0].proc.pid, "state_dir": str(group.state_dir)}), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_services_do_not_outlive_a_killed_driver(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    d = make_task(tmp_path / "tasks")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(d), str(tmp_path / "logs"), str(tmp_path / "sbx")],
                              stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(driver.stdout.readline())
        os.kill(info["pid"], 0)  # running
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (Path(f"/proc/{info['pid']}").exists() or Path(info["state_dir"]).exists()):
        time.sleep(0.1)
    assert not Path(f"/proc/{info['pid']}").exists(), "the service outlived its driver"
    assert not Path(info["state_dir"]).exists()
