"""minichat: a tiny real CLI agent (tests' spec-file harness). Reads its endpoint, model and system
prompt from ~/.minichat/config.json, its key from $MINICHAT_API_KEY; streams OpenAI Chat Completions
through the `openai` SDK (``--api chat``) or the Gemini API through the `google-genai` SDK (``--api
gemini``) with one `bash` tool, runs each call in the working directory, and prints the final answer
as its last line.

usage: minichat.py [--api chat|gemini] [--max-turns N] TASK
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BASH = {"name": "bash", "description": "Run a shell command in the working directory; returns its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
TOOLS = [{"type": "function", "function": BASH}]


def bash(arguments) -> str:
    """Run the call's ``command``; its output and exit code, or what was wrong with the call."""
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments or {})
        res = subprocess.run(["bash", "-c", args.get("command", "")], capture_output=True, text=True, timeout=60)
        return (res.stdout + res.stderr)[-4000:] + f"\n(exit {res.returncode})"
    except Exception as e:  # a bad call is the model's: report it back
        return f"error: {e}"


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


def chat(cfg, task: str, max_turns: int) -> str | None:
    """The Chat Completions loop: the final answer, or None when the turns ran out."""
    from openai import OpenAI

    client = OpenAI(base_url=cfg["base_url"], api_key=os.environ["MINICHAT_API_KEY"], max_retries=0)
    messages = [{"role": "system", "content": cfg["system"]}, {"role": "user", "content": task}]
    for _ in range(max_turns):
        text, calls = turn(client, cfg, messages)
        if not calls:
            return text.strip()
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls]})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": bash(c["arguments"])})
    return None


def gemini(cfg, task: str, max_turns: int) -> str | None:
    """The Gemini loop (``streamGenerateContent``): the final answer, or None when the turns ran out."""
    from google import genai
    from google.genai import types

    client = genai.Client(api_key=os.environ["MINICHAT_API_KEY"], http_options={"base_url": cfg["base_url"]})
    config = types.GenerateContentConfig(
        system_instruction=cfg["system"], max_output_tokens=cfg.get("max_tokens", 256),
        tools=[types.Tool(function_declarations=[{"name": BASH["name"], "description": BASH["description"],
                                                  "parameters_json_schema": BASH["parameters"]}])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents = [types.Content(role="user", parts=[types.Part(text=task)])]
    for _ in range(max_turns):
        parts = []  # the streamed turn as one content, consecutive text of one kind joined
        for chunk in client.models.generate_content_stream(model=cfg["model"], contents=contents, config=config):
            content = chunk.candidates[0].content if chunk.candidates else None
            for part in (content.parts or []) if content else []:
                last = parts[-1] if parts else None
                if None not in (part.text, last and last.text) and last.thought == part.thought:
                    last.text += part.text
                else:
                    parts.append(part)
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            return "".join(p.text or "" for p in parts if not p.thought).strip()
        contents.append(types.Content(role="model", parts=parts))
        contents.append(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id=c.id, name=c.name, response={"output": bash(c.args)})) for c in calls]))
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", choices=["chat", "gemini"], default="chat")
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("task")
    args = ap.parse_args()
    cfg = json.loads((Path.home() / ".minichat" / "config.json").read_text())
    answer = (gemini if args.api == "gemini" else chat)(cfg, args.task, args.max_turns)
    if answer is None:
        print("gave up: too many turns", file=sys.stderr)
        return 1
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
