"""The lead agent (tool: ``delegate``) and its worker (tool: ``bash``), each a chat loop of at most four
turns through the OpenAI SDK. Arguments: base URL, model, instruction; the key is $OPENAI_API_KEY."""

import json
import os
import subprocess
import sys

import openai

base_url, model, instruction = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key=os.environ["OPENAI_API_KEY"])


def tool(name, description, arg):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}}}


def loop(system, task, tools, act):
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    for _ in range(4):
        msg = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
        if not msg.tool_calls:
            return msg.content or ""
        messages.append({"role": "assistant", "content": msg.content or "",
                         "tool_calls": [c.model_dump() for c in msg.tool_calls]})
        for call in msg.tool_calls:
            try:
                args = json.loads(call.function.arguments)
            except ValueError:
                args = {}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": act(args)})
    return ""


def bash(args):
    out = subprocess.run(["bash", "-c", str(args.get("command", ""))], capture_output=True, text=True)
    return (out.stdout + out.stderr)[-2000:] or "(no output)"


def delegate(args):
    return loop("You are a worker. Do the task with the bash tool, then say what you did.", str(args.get("task", "")),
                [tool("bash", "run a shell command", "command")], bash)


print(loop("You are the lead. Delegate the task to a worker with the delegate tool, then report.", instruction,
           [tool("delegate", "hand a task to a worker agent", "task")], delegate))
