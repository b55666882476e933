"""The agent: a chat loop through the real OpenAI SDK with one ``bash`` tool, at most four turns."""

import json
import os
import subprocess
import sys

import openai

with open(os.path.expanduser("~/.my-agent.json")) as f:
    cfg = json.load(f)
client = openai.OpenAI(base_url=cfg["base_url"], api_key=cfg["api_key"])
tools = [{"type": "function", "function": {
    "name": "bash", "description": "run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
messages = [{"role": "user", "content": sys.argv[1]}]
for _ in range(4):
    msg = client.chat.completions.create(model=cfg["model"], messages=messages, tools=tools).choices[0].message
    if not msg.tool_calls:
        print(msg.content)
        break
    messages.append({"role": "assistant", "content": msg.content or "",
                     "tool_calls": [c.model_dump() for c in msg.tool_calls]})
    for call in msg.tool_calls:
        try:
            command = json.loads(call.function.arguments).get("command", "")
        except (json.JSONDecodeError, AttributeError):
            command = ""
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": (out.stdout + out.stderr)[-2000:]})
