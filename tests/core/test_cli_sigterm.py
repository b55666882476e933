"""SIGTERM (a scheduler, ``kill``, ``timeout``, a container stop) stops ``forge recipe`` / ``forge eval``
the way Ctrl-C does: the run's task is cancelled, its clean-up runs (sandboxes, proxy, store), and the
command exits 143. Before, SIGTERM's default killed the process where it stood."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

PROGRAM = textwrap.dedent("""
    import asyncio
    import typer
    from openforge.cli._signals import run_main

    async def job():
        print("ready", flush=True)
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.2)  # clean-up that itself awaits
            print("cleaned up", flush=True)

    app = typer.Typer()

    @app.command()
    def main():
        run_main(job())

    app()
""")


def test_sigterm_cancels_the_command_and_runs_its_clean_up():
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, (proc.returncode, out, err)  # before: -15, no clean-up
    assert "cleaned up" in out and "terminated (SIGTERM)" in err


def _children(pid: int) -> list[int]:
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def test_forge_eval_stops_on_sigterm_mid_run_and_leaves_no_sandbox(tmp_path):
    pytest.importorskip("openai")
    cmd = [sys.executable, "-m", "openforge.cli.main", "eval", "--harness", "react", "--env", "claw",
           "--backend", "reference", "--trials", "3", "--split", "train", "--out", str(tmp_path / "ev")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_children(proc.pid)) < 2:  # the watchdog + a sandbox
            time.sleep(0.2)
        running = _children(proc.pid)
        assert len(running) >= 2, "no rollout started"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "terminated (SIGTERM)" in err
    alive = [p for p in running if subprocess.run(["kill", "-0", str(p)], capture_output=True).returncode == 0]
    assert not alive, f"sandboxes left running: {alive}"
