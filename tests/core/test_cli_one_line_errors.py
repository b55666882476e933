"""One line, not a traceback (issue 26, item 5): a port already in use (``forge proxy serve --port``,
``forge rollout --proxy-port``); one broken harness plugin does not break ``forge harness list`` for
every harness; ``forge export sft --from EVAL_DIR`` reads an eval directory; ``-b runs/nope@last``
says the run directory does not exist."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.core.errors import ConfigError
from openforge.harness import Harness

runner = CliRunner()


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _taskdir(root: Path) -> Path:
    d = root / "tasks" / "hello"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('id = "hello"\nsplit = "eval"\ntimeout_s = 60\nexit_code_reward = true\n')
    (d / "instruction.md").write_text("Create hello.txt.")
    (d / "verify.sh").write_text('#!/bin/sh\ntest -f "$1/hello.txt"\n')
    os.chmod(d / "verify.sh", 0o755)
    (root / "s.yaml").write_text('tasks:\n  hello:\n    - shell: "echo hi > hello.txt"\n    - text: "Done."\n'
                                 'final: "Done."\n')
    return root / "tasks"


def test_proxy_serve_on_a_busy_port_is_one_line(tmp_path: Path, busy_port: int) -> None:
    (tmp_path / "s.yaml").write_text("final: hi\n")
    r = subprocess.run([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "-b",
                        f"scripted:{tmp_path / 's.yaml'}", "--port", str(busy_port)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-3000:]  # before: 1 and a 63-line traceback
    assert "Traceback" not in r.stderr
    assert f"--port {busy_port}: 127.0.0.1:{busy_port} is already in use" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3, r.stderr


def test_rollout_on_a_busy_proxy_port_is_a_config_error(tmp_path: Path, busy_port: int) -> None:
    pytest.importorskip("openai")
    tasks = _taskdir(tmp_path)
    res = runner.invoke(app, ["rollout", "--env", str(tasks), "--task", "hello", "-b",
                              f"scripted:{tmp_path / 's.yaml'}", "--proxy-port", str(busy_port),
                              "--out", str(tmp_path / "out")])
    assert isinstance(res.exception, ConfigError), repr(res.exception)  # before: OSError
    assert f"--proxy-port {busy_port}" in str(res.exception) and "already in use" in str(res.exception)


class _BrokenHarness(Harness):
    name = "broken-demo"

    def __init__(self, **kw: object) -> None:
        raise RuntimeError("this plugin's constructor is broken")

    async def run(self, ctx):  # type: ignore[override]
        raise AssertionError("never constructed")


def test_one_broken_harness_plugin_does_not_break_harness_list() -> None:
    from openforge.plugins import HARNESSES

    HARNESSES.register("broken-demo", _BrokenHarness)
    try:
        res = runner.invoke(app, ["harness", "list", "--json"])
        assert res.exit_code == 0, repr(res.exception)  # before: the RuntimeError, for every harness
        rows = {r["name"]: r for r in json.loads(res.output)}
        assert rows["broken-demo"]["broken"] is True
        assert "RuntimeError: this plugin's constructor is broken" in rows["broken-demo"]["error"]
        assert rows["react"]["installed"] is True  # the others are still listed
        table = runner.invoke(app, ["harness", "list"])
        assert table.exit_code == 0 and "broken-demo" in table.output and "react" in table.output
    finally:
        HARNESSES.unregister("broken-demo")


def test_backend_run_at_last_of_a_missing_run_dir_says_so(tmp_path: Path) -> None:
    res = runner.invoke(app, ["eval", "-H", "react", "--env", "claw", "-b", "runs/nope@last",
                              "--out", str(tmp_path / "o")])
    assert isinstance(res.exception, ConfigError), repr(res.exception)
    msg = str(res.exception)
    assert "the run directory runs/nope does not exist" in msg and "KIND:ARG" not in msg  # before: KIND:ARG


def test_rollout_backend_run_at_last_of_a_missing_run_dir_says_so(tmp_path: Path) -> None:
    res = runner.invoke(app, ["rollout", "-H", "react", "--env", "claw", "-t", "files-create-hello", "-b",
                              "runs/nope@last", "--out", str(tmp_path / "o")])
    assert isinstance(res.exception, ConfigError), repr(res.exception)
    msg = str(res.exception)
    assert "the run directory runs/nope does not exist" in msg and "KIND:ARG" not in msg  # before: KIND:ARG


def test_export_sft_from_an_eval_directory(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    tasks = _taskdir(tmp_path)
    out = tmp_path / "ev"
    res = runner.invoke(app, ["eval", "-H", "react", "--env", str(tasks), "-b", f"scripted:{tmp_path / 's.yaml'}",
                              "--trials", "1", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = tmp_path / "sft.jsonl"
    res = runner.invoke(app, ["export", "sft", str(data), "--from", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)  # before: "no such file"
    rows = [json.loads(x) for x in data.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["messages"], rows
    missing = runner.invoke(app, ["export", "sft", str(data), "--from", str(tmp_path / "nope")])
    assert "no such file or directory" in str(missing.exception)


def test_environment_errors_read_without_the_trailing_underscore() -> None:
    import traceback

    from openforge.core.errors import EnvError, EnvironmentError_
    from openforge.runner.rollout_steps import _err

    assert EnvironmentError_ is EnvError  # the old name still imports
    err = EnvironmentError_("setup.sh of t failed (1)")
    assert _err(err) == "EnvError: setup.sh of t failed (1)"  # before: "EnvironmentError_: ..."
    assert "EnvironmentError_" not in "".join(traceback.format_exception(err))


def test_docs_and_help_name_openforge_run() -> None:
    """The function is ``openforge.run``; ``forge`` is the command. (docs/architecture.md is generated
    from the layer test by its own change.)"""
    import re

    root = Path(__file__).resolve().parents[2]
    files = [*(root / "openforge").rglob("*.py"), *(p for p in (root / "docs").glob("*.md")
                                                    if p.name != "architecture.md")]
    wrong = [f"{p.relative_to(root)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"(?<![\w.])forge\.run\b", line)]
    assert not wrong, wrong
