"""One attack scenario, run as its own driver process (as root, or as a normal user): a real proxy
with a store in a run directory, a task directory with a verifier, two rollouts' sandboxes, and the
adversarial agent (``agent.py``) in one of them. Prints one JSON report on stdout.

Usage: ``python _scenario.py --mode MODE --tokenizer DIR --work DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from openforge.core.task import Resources, Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.backends.transformers import load_tokenizer
from openforge.proxy.server import ProxyServer
from openforge.store import TrajectoryStore

AGENT = Path(__file__).with_name("agent.py")
PERSIST = """
import os, subprocess, sys, time
for _ in range(2):  # double fork + setsid: re-parented, in a session of its own
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1] + "-child"])
        os._exit(0)
time.sleep(600)
"""


def processes_with(marker: str) -> dict[int, str]:
    """Host pids whose command line holds ``marker``, with their host uid."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                uid = next(ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                           if ln.startswith("Uid:"))
                out[int(pid)] = uid
        except (OSError, StopIteration):
            continue
    return out


def make_task_dir(root: Path) -> Path:
    d = root / "tasks" / "t1"
    d.mkdir(parents=True)
    (d / "verify.py").write_text("print('VERIFIER-SECRET')\n")
    (d / "solution.sh").write_text("echo REFERENCE-SOLUTION\n")
    return d


async def scenario(mode: str, tokenizer: str, work: Path) -> dict:
    admin, host_key = f"admintok-{secrets.token_hex(8)}", f"sk-host-{secrets.token_hex(8)}"
    os.environ["OPENFORGE_ADMIN_TOKEN"], os.environ["OPENAI_API_KEY"] = admin, host_key
    run_dir = work / "run"
    run_dir.mkdir(parents=True)
    store = TrajectoryStore(run_dir / "trajectories.db")
    task_dir = make_task_dir(work)
    backend = ScriptedBackend({"turns": [{"text": "hello"}] * 4}, tokenizer=load_tokenizer(tokenizer))
    decoy = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    marker = f"openforge-persist-{secrets.token_hex(6)}"
    report: dict = {"driver_uid": os.getuid()}
    launcher = LocalLauncher(base_dir=work / "sbx", isolation=mode)
    report["isolation"] = launcher.isolation
    async with ProxyServer(backend, store=store, uds=str(run_dir / "admin.sock"), admin_token=admin) as proxy:
        a, b = proxy.create_rollout("t1"), proxy.create_rollout("t1")
        task = Task(id="t1", instruction="attack", resources=Resources(max_processes=64))

        def spec(h) -> SandboxSpec:
            return SandboxSpec(rollout_id=h.rollout_id, task=task, proxy_url=proxy.url, api_key=h.api_key,
                               proxy_uds=proxy.agent_uds, hidden_paths=[str(task_dir)])

        sa, sb = await launcher.start(spec(a)), await launcher.start(spec(b))
        await sb.write_file("secret.txt", b"OTHER-ROLLOUT-SECRET")
        outside = {"host_tmp": f"/tmp/openforge-pwned-{marker}", "usr_local": f"/usr/local/openforge-pwned-{marker}",
                   "etc": f"/etc/openforge-pwned-{marker}", "other_rollout": str(sb.workdir / "pwned.txt"),
                   "task_dir": str(task_dir / "verify.py"), "run_dir": str(run_dir / "pwned.txt")}
        cfg = {
            "proxy_url": sa.proxy_url, "rollout_id": a.rollout_id, "api_key": a.api_key, "admin_token": admin,
            "other_rollout_id": b.rollout_id, "host_ports": [int(proxy.url.rsplit(":", 1)[1]),
                                                             decoy.sockets[0].getsockname()[1]],
            "secrets": [admin, host_key],
            "read_paths": {"other_rollout": str(sb.workdir / "secret.txt"), "sandboxes": str(work / "sbx"),
                           "verifier": str(task_dir / "verify.py"), "solution": str(task_dir / "solution.sh"),
                           "store": str(run_dir / "trajectories.db"), "run_dir": str(run_dir),
                           "shadow": "/etc/shadow", "driver_home": os.path.expanduser("~"),
                           "claw_checks": str(Path(__import__("openforge").__file__).parent / "envs" / "claw" / "spec.py")},
            "write_paths": outside, "unix_sockets": [str(run_dir / "admin.sock")], "marker": marker,
        }
        await sa.write_file("agent.py", AGENT.read_bytes())
        await sa.write_file("cfg.json", json.dumps(cfg).encode())
        r = await sa.exec([sys.executable, "agent.py", "cfg.json"], timeout_s=90)
        try:
            report["agent"] = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            report["agent_failed"] = {"rc": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-2000:]}
        report["other_root_name"] = sb.root.name
        # Try to outlive the sandbox: detached, re-parented processes in their own sessions, while
        # the attacker's command still runs; then the sandbox is closed under it.
        persist = asyncio.ensure_future(sa.exec([sys.executable, "-c", PERSIST, marker], timeout_s=300))
        for _ in range(100):
            if len(processes_with(marker + "-child")) >= 2:
                break
            await asyncio.sleep(0.1)
        report["persisting_while_open"] = processes_with(marker + "-child")  # pid -> host uid
        report["rollout_open_after_attack"] = proxy.recorder.get(a.rollout_id).finished is None
        await sa.close()
        await sb.close()
        persist.cancel()
        await launcher.aclose()
        time.sleep(0.5)
        survivors = processes_with(marker)
        report["survivors"] = survivors
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        report["host_files_written"] = [n for n, p in outside.items()
                                        if Path(p).exists() and b"pwned" in Path(p).read_bytes()]
        for p in outside.values():  # leave nothing behind whatever happened
            Path(p).unlink(missing_ok=True) if not p.endswith("verify.py") else None
    decoy.close()
    store.close()
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(scenario(a.mode, a.tokenizer, Path(a.work)))), flush=True)


if __name__ == "__main__":
    main()
