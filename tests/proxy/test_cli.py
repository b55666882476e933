"""``forge proxy serve`` as a real process: prints its URL and admin token, serves the real openai SDK."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest
from testservers import serve_address

openai = pytest.importorskip("openai")


def test_forge_proxy_serve_end_to_end(tmp_path, tokenizer):
    script = tmp_path / "policy.yaml"
    script.write_text("turns:\n  - text: Hello from the script.\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENFORGE_ADMIN_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend",
                             f"scripted:{script}", "--port", "0", "--store", str(tmp_path / "t.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        url, token = serve_address(proc, max_lines=40)
        h = httpx.post(f"{url}/admin/rollouts", json={"task_id": "demo"}, headers={"authorization": f"Bearer {token}"}).json()
        client = openai.OpenAI(base_url=h["openai_base_url"], api_key=h["api_key"], max_retries=0)
        r = client.chat.completions.create(model="whatever", messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.content == "Hello from the script."
        traj = httpx.post(f"{url}/admin/rollouts/{h['rollout_id']}/finish", json={"reward": 1},
                          headers={"authorization": f"Bearer {token}"}).json()
        assert traj["status"] == "success" and len(traj["segments"]) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    from openforge.store import TrajectoryStore

    with TrajectoryStore(tmp_path / "t.db") as store:
        assert store.get_trajectory(h["rollout_id"]).reward == 1.0


def test_non_loopback_bind_needs_an_explicit_admin_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENFORGE_ADMIN_TOKEN"}
    r = subprocess.run([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend", "scripted:x.yaml",
                        "--host", "0.0.0.0"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "OPENFORGE_ADMIN_TOKEN" in r.stderr
