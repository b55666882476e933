"""minichat: a tiny real CLI agent (tests' spec-file harness). Reads its endpoint, model and system
prompt from ~/.minichat/config.json, its key from $MINICHAT_API_KEY; streams OpenAI Chat Completions
through the `openai` SDK with one `bash` tool, runs each call in the working directory, and prints
the final answer as its last line.

usage: minichat.py [--max-turns N] TASK
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from openai import OpenAI

TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command in the working directory; returns its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def turn(client, cfg, messages):
    """One streamed completion: (text, [(id, name, arguments)])."""
    text, calls = "", {}
    stream = client.chat.completions.create(model=cfg["model"], messages=messages, tools=TOOLS, stream=True,
                                            max_tokens=cfg.get("max_tokens", 256))
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function is not None:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
    return text, [calls[i] for i in sorted(calls)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("task")
    args = ap.parse_args()
    cfg = json.loads((Path.home() / ".minichat" / "config.json").read_text())
    client = OpenAI(base_url=cfg["base_url"], api_key=os.environ["MINICHAT_API_KEY"], max_retries=0)
    messages = [{"role": "system", "content": cfg["system"]}, {"role": "user", "content": args.task}]
    for _ in range(args.max_turns):
        text, calls = turn(client, cfg, messages)
        if not calls:
            print(text.strip())
            return 0
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls]})
        for c in calls:
            try:
                cmd = json.loads(c["arguments"] or "{}").get("command", "")
                res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
                out = (res.stdout + res.stderr)[-4000:] + f"\n(exit {res.returncode})"
            except Exception as e:  # a bad call is the model's: report it back
                out = f"error: {e}"
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
    print("gave up: too many turns", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
