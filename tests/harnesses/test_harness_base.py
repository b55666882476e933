"""Harness.execute classification with real processes in a real local sandbox: normal end,
crash, budget exceeded (and nothing left running), not installed, exception in run()."""

from __future__ import annotations

import sys

import pytest
from harness_helpers import leftover_processes, spec

from openforge.core.errors import HarnessError
from openforge.core.types import RolloutStatus
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.harnesses.cli import CliHarness


class ShellHarness(CliHarness):
    """A CLI harness whose 'agent' is a shell script (exercise the framework, not an agent)."""

    name = "shell-script"
    executable = "sh"

    def __init__(self, script: str):
        super().__init__(binary="/bin/sh")
        self.script = script

    def config_files(self, ctx):
        return {".shell-script/config": f"key={ctx.api_key}\n"}

    def command(self, ctx, exe):
        return [exe, "-c", self.script]


async def test_normal_end_captures_output_env_and_config(launcher, make_ctx):
    sbx = await launcher.start(spec("r-ok"))
    try:
        ctx = make_ctx(sbx, "r-ok")
        h = ShellHarness('cat "$HOME/.shell-script/config"; echo "$OPENAI_BASE_URL $PWD"; echo err >&2; echo done')
        res = await h.execute(ctx)
    finally:
        await sbx.close()
    assert res.ok and res.status is None and res.exit_code == 0
    assert "key=sk-test" in res.stdout and f"/r/r-ok/v1 {sbx.workdir}" in res.stdout
    assert res.stderr.strip() == "err" and res.final_text == "done"


async def test_crash_is_harness_error_with_stderr_tail(launcher, make_ctx):
    sbx = await launcher.start(spec("r-crash"))
    try:
        res = await ShellHarness("echo 'fatal: config is broken' >&2; exit 3").execute(make_ctx(sbx, "r-crash"))
    finally:
        await sbx.close()
    assert res.status == RolloutStatus.HARNESS_ERROR and res.exit_code == 3
    assert "shell-script crashed (exit code 3)" in res.error and "config is broken" in res.error


async def test_budget_exceeded_is_timeout_and_kills_the_group(launcher, make_ctx):
    sbx = await launcher.start(spec("r-hang"))
    try:
        # a child that ignores SIGTERM in the background plus a hanging foreground process
        h = ShellHarness("(trap '' TERM; sleep 300) & sleep 300")
        res = await h.execute(make_ctx(sbx, "r-hang", budget_s=2.0))
        assert leftover_processes("r-hang") == []
    finally:
        await sbx.close()
    assert res.status == RolloutStatus.TIMEOUT
    assert "exceeded its wall-clock budget of 2s" in res.error and res.duration_s < 20


async def test_not_installed_is_a_clear_harness_error(launcher, make_ctx, monkeypatch):
    from openforge.harnesses.codex import CodexHarness

    monkeypatch.setenv("OPENFORGE_CODEX_BIN", "/nonexistent/codex")
    sbx = await launcher.start(spec("r-missing"))
    try:
        res = await CodexHarness().execute(make_ctx(sbx, "r-missing"))
    finally:
        await sbx.close()
    assert res.status == RolloutStatus.HARNESS_ERROR
    assert "codex is not installed" in res.error and "/nonexistent/codex" in res.error


async def test_missing_cli_message_says_how_to_install(monkeypatch, tmp_path):
    from openforge.harnesses.codex import CodexHarness

    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(HarnessError, match="forge harness install codex"):
        CodexHarness().check_installed()
    assert CodexHarness().describe()["installed"] is False


async def test_exception_in_user_run_is_harness_error(launcher, make_ctx):
    class Broken(Harness):
        name = "broken"

        async def run(self, ctx: RolloutContext) -> HarnessResult:
            raise KeyError("missing-setting")

    sbx = await launcher.start(spec("r-exc"))
    try:
        res = await Broken().execute(make_ctx(sbx, "r-exc"))
    finally:
        await sbx.close()
    assert res.status == RolloutStatus.HARNESS_ERROR
    assert res.error == "broken raised KeyError: 'missing-setting'" and "Traceback" in res.stderr


def test_from_exec_signal_message():
    from openforge.launchers.base import ExecResult

    r = HarnessResult.from_exec(ExecResult(-9, "", "", 1.0), harness="x")  # a signal the launcher did not send
    assert r.status == RolloutStatus.POLICY_FAILURE and "killed by signal 9 (SIGKILL)" in r.error
    r = HarnessResult.from_exec(ExecResult(137, "", "", 1.0), harness="x")  # the sandbox init's 128+N
    assert r.status == RolloutStatus.POLICY_FAILURE and r.extra["killed_by_signal"] == 9
    r = HarnessResult.from_exec(ExecResult(1, "", "boom", 1.0), harness="x")  # an ordinary crash
    assert r.status == RolloutStatus.HARNESS_ERROR and "exit code 1" in r.error
    r = HarnessResult.from_exec(ExecResult(None, "", "", 1.0, timed_out=True), harness="x")  # the launcher's kill
    assert r.status == RolloutStatus.TIMEOUT


def test_from_exec_a_signal_of_its_own_or_the_oom_killer_is_not_the_policys():
    from openforge.launchers.base import ExecResult

    for rc in (-11, 139, -6, 134, 152, 153):  # SIGSEGV, SIGABRT (direct / via init), SIGXCPU, SIGXFSZ
        r = HarnessResult.from_exec(ExecResult(rc, "", "Segmentation fault", 1.0), harness="x")
        assert r.status == RolloutStatus.HARNESS_ERROR and "crashed" in r.error, (rc, r.status)
    r = HarnessResult.from_exec(ExecResult(137, "", "", 1.0, oom_kills=1), harness="x")  # the cgroup's OOM killer
    assert r.status == RolloutStatus.INFRA_ERROR and "memory cgroup" in r.error
    r = HarnessResult.from_exec(ExecResult(143, "", "", 1.0, oom_kills=1), harness="x")  # an OOM elsewhere; a SIGTERM
    assert r.status == RolloutStatus.POLICY_FAILURE
    assert sys.platform.startswith("linux")
