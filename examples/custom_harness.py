"""A custom harness in a few lines: your own agent, run as a process in the rollout's sandbox.

Subclass ``Harness`` and implement ``run``: write whatever config your agent reads below the private
HOME, start it with ``ctx.exec`` (the sandbox applies the wall-clock budget and kills the process
group), and return ``HarnessResult.from_exec`` (crash → harness_error, over budget → timeout).
Register it for ``forge rollout --harness my-agent`` in your package's pyproject.toml::

    [project.entry-points."openforge.harnesses"]
    my-agent = "my_pkg.harness:MyAgent"
"""

from __future__ import annotations

import json
import sys

from openforge.harness import Harness, HarnessResult, RolloutContext

# The "agent": one model call through the real OpenAI SDK, then it runs the shell command the
# model asked for (any tool call with a `command`/`cmd` argument) and reports back once.
AGENT = r"""
import json, os, subprocess, sys, openai
cfg = json.load(open(os.path.expanduser("~/.my-agent.json")))
client = openai.OpenAI(base_url=cfg["base_url"], api_key=cfg["api_key"])
tools = [{"type": "function", "function": {"name": "bash", "description": "run a shell command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
msgs = [{"role": "user", "content": sys.argv[1]}]
for _ in range(4):
    m = client.chat.completions.create(model=cfg["model"], messages=msgs, tools=tools).choices[0].message
    if not m.tool_calls:
        print(m.content); break
    msgs.append({"role": "assistant", "content": m.content or "", "tool_calls": [c.model_dump() for c in m.tool_calls]})
    for c in m.tool_calls:
        cmd = json.loads(c.function.arguments).get("command", "")
        out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        msgs.append({"role": "tool", "tool_call_id": c.id, "content": (out.stdout + out.stderr)[-2000:]})
"""


class MyAgent(Harness):
    name = "my-agent"
    wire_api = "chat"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        cfg = {"base_url": ctx.openai_base_url, "api_key": ctx.api_key, "model": ctx.model}
        await ctx.write_home_file(".my-agent.json", json.dumps(cfg))
        res = await ctx.exec([sys.executable, "-c", AGENT, ctx.instruction])
        out = HarnessResult.from_exec(res, harness=self.name, budget_s=ctx.budget_s)
        out.final_text = res.stdout.strip() or None
        return out
