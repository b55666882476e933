"""The end-to-end driver of the harness tests: the real proxy (scripted policy) on a Unix socket,
a real local sandbox whose network namespace only has loopback, the real harness process.

Not a test module: imported by the test_e2e_* modules."""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openforge.core.task import Task
from openforge.core.trajectory import Trajectory, validate_segments
from openforge.core.types import RolloutStatus
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers.base import SandboxSpec

REPO = Path(__file__).resolve().parents[2]


@dataclass
class E2E:
    result: HarnessResult
    traj: Trajectory
    files: dict[str, bytes | None]  # requested workdir files, read before the sandbox closed
    isolation: str
    net_devices: list[str]  # network interfaces seen from inside the sandbox
    leftover: list[int]


def _net_devices(text: str) -> list[str]:
    return [ln.split(":")[0].strip() for ln in text.splitlines()[2:] if ":" in ln]


async def run_e2e(harness: Harness, script: Any, instruction: str, *, tmp_path: Path, tokenizer: Any,
                  budget_s: float = 120.0, read: tuple[str, ...] = (), env: dict[str, str] | None = None,
                  workdir_files: dict[str, str] | None = None, expose: dict[int, str] | None = None) -> E2E:
    """Run ``harness`` once; ``expose`` maps in-sandbox ports to host Unix sockets (loopback services
    the harness may reach, e.g. a web page), ``read`` names workdir files to return."""
    from harness_helpers import leftover_processes

    from openforge.launchers.local import LocalLauncher
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer

    uds = str(tmp_path / f"proxy-{uuid.uuid4().hex[:6]}.sock")
    task = Task(id=f"e2e-{harness.name}", instruction=instruction, timeout_s=budget_s)
    async with ProxyServer(ScriptedBackend(script, tokenizer=tokenizer), uds=uds) as proxy:
        h = proxy.create_rollout(task.id, harness=harness.name)
        # the harness cache is NOT bound here: harness.ro_paths() must be enough (as in run_rollout)
        launcher = LocalLauncher(ro_binds=[str(REPO), sys.prefix], grace_s=1.0)
        try:
            sbx = await launcher.start(SandboxSpec(rollout_id=h.rollout_id, task=task, proxy_url=proxy.url,
                                                   api_key=h.api_key, proxy_uds=uds,
                                                   ro_paths=list(harness.ro_paths())))
            try:
                for port, sock in (expose or {}).items():
                    await sbx.expose(sock, port=port)
                for rel, content in (workdir_files or {}).items():
                    await sbx.write_file(sbx.workdir / rel, content.encode())
                base = f"{sbx.proxy_url}/r/{h.rollout_id}"
                ctx = RolloutContext(rollout_id=h.rollout_id, task=task, sandbox=sbx, api_key=h.api_key,
                                     openai_base_url=base + "/v1", anthropic_base_url=base, budget_s=budget_s,
                                     env=dict(env or {}))
                result = await harness.execute(ctx)
                files: dict[str, bytes | None] = {}
                for rel in read:
                    p = sbx.workdir / rel
                    files[rel] = p.read_bytes() if p.exists() else None
                net = await sbx.exec(["cat", "/proc/net/dev"], timeout_s=30)
                leftover = leftover_processes(h.rollout_id)
            finally:
                await sbx.close()
        finally:
            await launcher.aclose()
        status = result.status or RolloutStatus.SUCCESS
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0 if result.ok else 0.0, status=status,
                                    error=result.error)
    validate_segments(traj.calls, traj.segments)
    return E2E(result, traj, files, launcher.isolation, _net_devices(net.stdout), leftover)


def describe_failure(run: E2E) -> str:
    r = run.result
    return (f"status={r.status} error={r.error}\n--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n"
            f"{r.stderr[-3000:]}\ncalls={len(run.traj.calls)}")


def tool_calls(traj: Trajectory) -> list[tuple[str, Any]]:
    """(name, parsed arguments) of every tool call the policy made, in order. Reads the proxy's
    recorded response (its canonical ``tool_calls`` list, or the wire shapes via readings.steps)."""
    import json

    out: list[tuple[str, Any]] = []
    for c in traj.calls:
        resp = c.response or {}
        if isinstance(resp.get("tool_calls"), list):
            for tc in resp["tool_calls"]:
                args = tc.get("arguments")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    pass
                out.append((tc.get("name"), args))
            continue
        from openforge.readings.steps import extract_steps

        out.extend((s.name, s.arguments) for s in extract_steps([c]))
    return out


def final_text(traj: Trajectory) -> str:
    resp = traj.calls[-1].response or {}
    return str(resp.get("text") or "")


def assert_isolated(run: E2E) -> None:
    """The harness ran in a network namespace that has only loopback (nothing else reachable), where
    the machine allows namespaces at all; and it left no process behind."""
    import warnings

    from openforge.launchers._isolation import detect_isolation

    mode, why = detect_isolation()
    if mode == "none":
        warnings.warn(f"network namespaces unavailable here ({why}); isolation not asserted", stacklevel=2)
    else:
        assert run.isolation in ("bwrap", "unshare"), run.isolation
        assert run.net_devices == ["lo"], run.net_devices
    assert run.leftover == [], f"processes left behind: {run.leftover}"


def installed_harness(name: str, kwargs: dict[str, Any], *, skip_why: str | None = None) -> Harness:
    """Harness ``name`` built with ``kwargs``, or a missing-dependency skip (``testdeps.missing``: a failure
    in CI) when its CLI is not installed; ``skip_why``: a plain skip instead, with that reason."""
    import pytest
    from testdeps import missing

    from openforge.core.errors import HarnessError
    from openforge.plugins import harness_class

    h = harness_class(name)(**kwargs)
    try:
        h.check_installed()
    except HarnessError as e:
        if skip_why:
            pytest.skip(f"{name} is not installed here ({skip_why}): {e}")
        missing(f"{name} is not installed here: {e}")
    return h


def case_id(case: Any) -> str:
    """``harness-api`` for a (harness, kwargs, tool, arg, api) case or its ``pytest.param``."""
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}-{values[4]}"


async def shell_call_then_answer(h: Harness, name: str, tool: str, arg: str, api: str, *, tmp_path: Path,
                                 tokenizer: Any) -> E2E:
    """The CLI-harness contract: a scripted policy makes one shell tool call, then answers; the command ran,
    the calls are exact and on ``api``, the final answer came back, nothing left the loopback sandbox."""
    marker = f"hello-{name}-{api}"
    script = {"turns": [{"shell": f"echo {marker} > out.txt"}, {"text": "Done: wrote out.txt."}]}
    run = await run_e2e(h, script, "Write a greeting to out.txt, then say done.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=180, read=("out.txt",))
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] is not None and run.files["out.txt"].decode().strip() == marker, describe_failure(run)
    calls = tool_calls(run.traj)
    assert calls[0][0] == tool and calls[0][1][arg] == f"echo {marker} > out.txt", calls
    assert len(calls) == 1, calls
    assert all(c.api == api for c in run.traj.calls), [c.api for c in run.traj.calls]
    assert len(run.traj.calls) >= 2 and (run.traj.calls[-1].response or {}).get("text") == "Done: wrote out.txt."
    assert run.result.final_text and "Done" in run.result.final_text, describe_failure(run)
    assert_isolated(run)
    return run
