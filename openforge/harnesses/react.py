"""``react``: openforge's own minimal agent harness — the CPU default and the reference harness.

Owns: the agent loop (OpenAI Chat Completions with four tools: ``shell``, ``read_file``,
``write_file``, ``finish``), which runs as its own process inside the sandbox using the real
``openai`` SDK against the proxy (``python -m openforge.harnesses.react``), and
:class:`ReactHarness`, which launches that process. The prompt is short and the turns and
tool-output length are capped, because the CPU default policy is a 135M model with an 8k context.

The process prints one JSON line at the end: ``{"final": ..., "turns": n, "stop": reason}``.
Exit codes: 0 the loop ended (finish, plain answer or turn limit), 3 the model API failed,
2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..harness import RolloutContext
from .cli import PythonLoopHarness

__all__ = ["SYSTEM_PROMPT", "TOOLS", "ReactHarness", "main"]

SYSTEM_PROMPT = (
    "You are an agent working in a Linux shell. Use the tools to complete the task in the current "
    "directory. Call finish with a short answer when done."
)


def _fn(name: str, desc: str, props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
        "required": list(props)}}}


TOOLS: list[dict[str, Any]] = [
    _fn("shell", "Run a bash command; returns exit code and output.", {"command": "the command"}),
    _fn("read_file", "Read a text file.", {"path": "file path"}),
    _fn("write_file", "Write a text file.", {"path": "file path", "content": "full new content"}),
    _fn("finish", "End the task with a final answer.", {"answer": "short final answer"}),
]


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n…[truncated]…\n" + text[-limit // 2:]


def run_tool(name: str, args: dict[str, Any], *, workdir: Path, max_output: int, cmd_timeout: float) -> str:
    """Execute one tool call and return its (capped) result text."""
    try:
        if name == "shell":
            try:
                p = subprocess.run(["bash", "-c", str(args["command"])], cwd=workdir, capture_output=True,
                                   text=True, timeout=cmd_timeout, stdin=subprocess.DEVNULL)
                return _cap(f"exit code {p.returncode}\n{p.stdout}{p.stderr}".rstrip(), max_output)
            except subprocess.TimeoutExpired:
                return f"error: command timed out after {cmd_timeout:.0f}s"
        if name == "read_file":
            return _cap((workdir / str(args["path"])).read_text(errors="replace"), max_output)
        if name == "write_file":
            path = workdir / str(args["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(args["content"]))
            return f"wrote {len(str(args['content']))} characters to {args['path']}"
        return f"error: unknown tool {name!r}; use one of shell, read_file, write_file, finish"
    except KeyError as e:
        return f"error: missing argument {e.args[0]!r} for {name}"
    except OSError as e:
        return f"error: {e}"


def agent_loop(task: str, *, model: str, base_url: str, api_key: str, workdir: Path, max_turns: int,
               max_tokens: int, max_output: int, cmd_timeout: float) -> dict[str, Any]:
    """The ReAct loop: ask the model, run its tool calls, feed results back, until finish."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=2, timeout=600)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": task}]
    for turn in range(1, max_turns + 1):
        resp = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                                              max_tokens=max_tokens)
        msg = resp.choices[0].message
        calls = msg.tool_calls or []
        entry: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
        if calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function",
                                    "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                   for c in calls]
        messages.append(entry)
        if not calls:
            return {"final": msg.content or "", "turns": turn, "stop": "answer"}
        for c in calls:
            try:
                args = json.loads(c.function.arguments or "{}")
                if not isinstance(args, dict):
                    raise ValueError("arguments must be a JSON object")
            except ValueError as e:
                result = f"error: arguments are not a valid JSON object ({e})"
            else:
                if c.function.name == "finish":
                    return {"final": str(args.get("answer", "")), "turns": turn, "stop": "finish"}
                result = run_tool(c.function.name, args, workdir=workdir, max_output=max_output,
                                  cmd_timeout=cmd_timeout)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
    return {"final": None, "turns": max_turns, "stop": "max_turns"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m openforge.harnesses.react", description=__doc__)
    ap.add_argument("--task", help="task text (default: $OPENFORGE_TASK or --task-file)")
    ap.add_argument("--task-file", type=Path)
    ap.add_argument("--model", default=os.environ.get("OPENFORGE_MODEL", "openforge-policy"))
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--max-output", type=int, default=1500, help="cap on each tool result (characters)")
    ap.add_argument("--cmd-timeout", type=float, default=60.0)
    a = ap.parse_args(argv)
    task = a.task or (a.task_file.read_text() if a.task_file else os.environ.get("OPENFORGE_TASK"))
    key = os.environ.get("OPENAI_API_KEY")
    if not task or not a.base_url or not key:
        print("react: need a task (--task/--task-file), a base URL (--base-url or OPENAI_BASE_URL) and "
              "OPENAI_API_KEY", file=sys.stderr)
        return 2
    try:
        out = agent_loop(task, model=a.model, base_url=a.base_url, api_key=key, workdir=Path.cwd(),
                         max_turns=a.max_turns, max_tokens=a.max_tokens, max_output=a.max_output,
                         cmd_timeout=a.cmd_timeout)
    except Exception as e:  # the model API failed: say so plainly, exit 3
        print(f"react: model API call failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    print(json.dumps(out))
    return 0


class ReactHarness(PythonLoopHarness):
    """Runs the react loop as ``python -m openforge.harnesses.react`` inside the sandbox."""

    name = "react"
    wire_api = "chat"
    install_hint = "built in (pip install openforge-rl; needs the `openai` package)"

    def __init__(self, *, python: str | None = None, max_turns: int = 8, max_tokens: int = 512,
                 max_output: int = 1500, **kw: Any):
        super().__init__(python=python, **kw)
        self.max_turns, self.max_tokens, self.max_output = max_turns, max_tokens, max_output

    @classmethod
    def prompt_spec(cls) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The system messages and tools of every call (for the context check before a run)."""
        return [{"role": "system", "content": SYSTEM_PROMPT}], TOOLS

    def check_installed(self) -> None:
        import importlib.util

        from ..core.errors import HarnessNotInstalled

        if importlib.util.find_spec("openai") is None:
            raise HarnessNotInstalled("react needs the `openai` package: pip install openai")

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "-m", "openforge.harnesses.react", "--task-file", self.task_file(ctx),
                "--model", ctx.model, "--base-url", ctx.openai_base_url, "--max-turns", str(self.max_turns),
                "--max-tokens", str(self.max_tokens), "--max-output", str(self.max_output), *self.extra_args]


if __name__ == "__main__":
    sys.exit(main())
