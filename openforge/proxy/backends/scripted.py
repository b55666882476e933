"""The scripted policy: a YAML list of turns replayed in order per rollout — a test double users want
for smoke-testing their harness against the real proxy, and the CPU default's "teacher" that replays
tasks' reference solutions.

Owns: :class:`ScriptedBackend`, :func:`load_script`.

Script format (YAML)::

    turns:                       # replayed in order, one per model call of a rollout
      - text: "Let me look."     # a plain answer (may be combined with `reasoning:`)
      - tool: {name: read, arguments: {path: README.md}}
      - shell: "echo hi > out.txt"   # mapped onto whatever shell tool the request offers
    final: "Done."               # answer once the turns are used up (default "Done.")
    tasks:                       # optional per-task scripts (by task id), same turn format
      claw-001: [{shell: "ls"}, {text: "ok"}]

``shell`` maps onto the offered shell tool: Codex ``exec_command{cmd}``, Claude Code ``Bash{command}``,
pi ``bash{command}``, OpenClaw ``exec{command}``, or any tool named like a shell with a ``cmd`` /
``command`` string parameter; a request that offers no tools at all (a text-protocol harness such as
aider, which runs the commands of ```` ```bash ```` blocks) gets the command as a fenced bash block. Output is rendered in the policy's tool-call format and tokenized with a
real tokenizer (SmolLM2's by default), so scripted calls are exact (each token's logprob is 0: the
scripted policy is deterministic).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from ...core.errors import BackendError, ConfigError
from .base import GenContext, Generation, SamplingParams, TokenBackend

__all__ = ["SHELL_TOOL_NAMES", "ScriptedBackend", "load_script"]

SHELL_TOOL_NAMES = ("exec_command", "bash", "exec", "shell", "run_shell_command", "execute_command",
                    "run_command", "terminal", "local_shell")
_TURN_KEYS = {"text", "tool", "shell", "reasoning"}


def _check_turns(turns: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(turns, list):
        raise ConfigError(f"{where}: 'turns' must be a list")
    out = []
    for i, t in enumerate(turns):
        if isinstance(t, str):
            t = {"text": t}
        if not isinstance(t, dict) or not (set(t) & {"text", "tool", "shell"}) or set(t) - _TURN_KEYS:
            raise ConfigError(f"{where}: turn {i} must be a mapping with one of text / tool / shell "
                              f"(optional reasoning), got {t!r}")
        if "tool" in t:
            tool = t["tool"]
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                raise ConfigError(f"{where}: turn {i}: tool needs a name (and optional arguments mapping)")
            if not isinstance(tool.get("arguments", {}), (dict, str)):
                raise ConfigError(f"{where}: turn {i}: tool arguments must be a mapping")
        out.append(t)
    return out


def load_script(source: str | Path | dict[str, Any] | list[Any]) -> dict[str, Any]:
    """Read and check a script (a path, a mapping, or a bare list of turns)."""
    where = "script"
    if isinstance(source, (str, Path)):
        p = Path(source).expanduser()
        where = str(p)
        if not p.is_file():
            raise ConfigError(f"scripted back-end: no such file {p}")
        try:
            source = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
    if isinstance(source, list):
        source = {"turns": source}
    if not isinstance(source, dict):
        raise ConfigError(f"{where}: expected a mapping with 'turns'")
    unknown = set(source) - {"turns", "final", "tasks"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (allowed: turns, final, tasks)")
    tasks = source.get("tasks") or {}
    if not isinstance(tasks, dict):
        raise ConfigError(f"{where}: 'tasks' must map task ids to turn lists")
    return {
        "turns": _check_turns(source.get("turns") or [], where),
        "final": str(source.get("final", "Done.")),
        "tasks": {str(k): _check_turns(v, f"{where}: tasks.{k}") for k, v in tasks.items()},
    }


def find_shell_tool(tools: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(tool name, command parameter)`` of the offered shell tool, if any."""
    by_name = {}
    for t in tools:
        fn = t.get("function", t)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            by_name[fn["name"].lower()] = fn
    for cand in SHELL_TOOL_NAMES:
        fn = by_name.get(cand)
        if fn is None:
            continue
        props = (fn.get("parameters") or {}).get("properties") or {}
        for param in ("cmd", "command"):
            if param in props or not props:
                return fn["name"], param
    return None


class ScriptedBackend(TokenBackend):
    """Replay a script per rollout. ``tokenizer`` defaults to SmolLM2's (loaded once, cached)."""

    exact = True
    honors_prefill = False
    name = "scripted"

    stream_chunks = 4  # a streaming request receives each turn's tokens in this many pushes

    def __init__(self, script: str | Path | dict[str, Any] | list[Any], tokenizer: Any = None, *,
                 token_delay_s: float = 0.0):
        self.script = load_script(script)
        self.token_delay_s = float(token_delay_s)  # > 0: emit one token per delay (simulates a slow model)
        self.cancelled: list[tuple[str, int]] = []  # (rollout_id, call_index) of generations cancelled midway
        self._tokenizer = tokenizer
        self._pos: dict[str, int] = {}
        self._renderer: Any = None

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from ..light_tokenizer import load_light_tokenizer  # no transformers/torch import: ~4 s less

            self._tokenizer = load_light_tokenizer("smollm2-135m")
        return self._tokenizer

    def _render(self) -> Any:
        if self._renderer is None:
            from ..render import Renderer

            self._renderer = Renderer(self.tokenizer)
        return self._renderer

    def next_turn(self, ctx: GenContext) -> dict[str, Any] | None:
        turns = self.script["tasks"].get(ctx.task_id, self.script["turns"])
        i = self._pos.get(ctx.rollout_id, 0)
        self._pos[ctx.rollout_id] = i + 1
        return turns[i] if i < len(turns) else None

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None
    ) -> Generation:
        ctx = ctx or GenContext()
        turn = self.next_turn(ctx) or {"text": self.script["final"]}
        calls: list[tuple[str, Any]] = []
        if "tool" in turn:
            calls.append((turn["tool"]["name"], turn["tool"].get("arguments") or {}))
        text = str(turn.get("text") or "")
        if "shell" in turn and not ctx.tools:  # a text-protocol harness (aider): a fenced bash block
            text = (text + "\n\n" if text else "") + f"```bash\n{turn['shell']}\n```"
        elif "shell" in turn:
            found = find_shell_tool(ctx.tools)
            if found is None:
                offered = [t.get("function", t).get("name") for t in ctx.tools]
                raise BackendError(f"scripted turn wants a shell command but the request offers no shell tool "
                                   f"(offered: {offered})")
            calls.append((found[0], {found[1]: str(turn["shell"])}))
        text = self._render().format_output(text, turn.get("reasoning"), calls)
        ids = self._render().encode(text)
        ctx.admit()
        try:
            if self.token_delay_s > 0:  # a slow model: one token at a time
                for t in ids:
                    await asyncio.sleep(self.token_delay_s)
                    ctx.emit([t], [0.0])
            elif ctx.streaming:  # a streaming request gets the turn in a few chunks, as a model would send it
                step = max(1, -(-len(ids) // self.stream_chunks))
                for i in range(0, len(ids), step):
                    ctx.emit(ids[i:i + step], [0.0] * len(ids[i:i + step]))
                    await asyncio.sleep(0)
            else:
                await asyncio.sleep(0)
                ctx.emit(ids, [0.0] * len(ids))
        except asyncio.CancelledError:
            self.cancelled.append((ctx.rollout_id, ctx.call_index))
            raise
        return Generation(output_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")
