"""The react harness's tools and CLI argument handling (the loop itself runs end to end in
test_e2e_react.py against the real proxy)."""

from __future__ import annotations

import subprocess
import sys

from openforge.harnesses.react import SYSTEM_PROMPT, TOOLS, main, run_tool


def test_tools_schema_is_small_and_complete():
    names = [t["function"]["name"] for t in TOOLS]
    assert names == ["shell", "read_file", "write_file", "finish"]
    assert len(SYSTEM_PROMPT) < 300  # the CPU default policy has an 8k context


def test_shell_read_write_and_errors(tmp_path):
    kw = {"workdir": tmp_path, "max_output": 200, "cmd_timeout": 5}
    assert run_tool("write_file", {"path": "a/b.txt", "content": "hi"}, **kw) == "wrote 2 characters to a/b.txt"
    assert run_tool("read_file", {"path": "a/b.txt"}, **kw) == "hi"
    out = run_tool("shell", {"command": "cat a/b.txt; exit 4"}, **kw)
    assert out == "exit code 4\nhi"
    big = run_tool("shell", {"command": "yes x | head -c 5000"}, **kw)
    assert len(big) < 260 and "[truncated]" in big
    assert run_tool("shell", {"command": "sleep 30"}, **{**kw, "cmd_timeout": 0.5}).startswith("error: command timed out")
    assert run_tool("shell", {}, **kw) == "error: missing argument 'command' for shell"
    assert run_tool("read_file", {"path": "nope.txt"}, **kw).startswith("error: ")
    assert "unknown tool 'rm'" in run_tool("rm", {}, **kw)


def test_missing_arguments_exit_2(monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENFORGE_TASK", raising=False)
    assert main(["--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "need a task" in capsys.readouterr().err


def test_module_runs_as_a_process_and_reports_api_failure(tmp_path):
    # port 9 on loopback: nothing listens, the SDK's connection fails -> exit 3 with a clear message
    env = {"OPENAI_API_KEY": "k", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "openforge.harnesses.react", "--task", "hi", "--base-url",
                        "http://127.0.0.1:9/v1"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 3 and "model API call failed" in p.stderr
