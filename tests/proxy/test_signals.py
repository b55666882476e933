"""Ctrl-C belongs to the program, not to the proxy: a run that started and stopped side proxies (held-out
evals, SFT teachers) still stops on SIGINT, and its own proxy is still serving while it winds down.

uvicorn >= 0.29 swaps in its own SIGINT/SIGTERM handlers while a server runs and puts back what it found
when it stops; with proxies stopped out of order that left a stopped server's handler installed, and
Ctrl-C did nothing at all (a `forge recipe claw-grpo` run ignored two Ctrl-Cs after its held-out eval)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from testservers import serve_address

PROGRAM = textwrap.dedent("""
    import asyncio, httpx
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer

    def proxy():
        return ProxyServer(ScriptedBackend({"turns": []}), admin_token="t", token_workers=0)

    async def main():
        async with proxy() as run_proxy:
            side = [await proxy().start() for _ in range(3)]  # side proxies, as a held-out eval starts them
            await side[1].stop(); await side[0].stop(); await side[2].stop()  # and stopped in any order
            print("ready", flush=True)
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                async with httpx.AsyncClient() as c:
                    r = await c.get(f"{run_proxy.url}/admin/health", headers={"authorization": "Bearer t"})
                print("cancelled; run proxy answers", r.status_code, flush=True)
                raise

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("stopped", flush=True)
""")


def test_ctrl_c_after_side_proxies_cancels_the_run_while_its_proxy_serves():
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)  # before: no exit at all (the signal went to a stopped server)
    finally:
        proc.kill()
    assert "cancelled; run proxy answers 200" in out, out
    assert out.strip().endswith("stopped"), out


def test_forge_proxy_serve_stops_cleanly_on_sigterm(tmp_path):
    script = tmp_path / "policy.yaml"
    script.write_text("turns:\n  - text: hi\n")
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend",
                             f"scripted:{script}", "--port", "0", "--store", str(tmp_path / "t.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        serve_address(proc, max_lines=40)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0  # a service manager's stop: the session closes, not a kill by signal
    finally:
        proc.kill()
    assert not list(tmp_path.glob("*.sock"))
