"""Driver process for the ``browser-use`` harness: runs a real ``browser_use.Agent`` once.

Runs with the interpreter of the environment where ``browser-use`` is installed (its own venv in
the harness cache), so it imports nothing from openforge. Prints one JSON line at the end:
``{"final", "steps", "done", "success", "urls"}``. Exit 3 when the agent run itself failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path


async def run(a: argparse.Namespace) -> dict:
    from browser_use import Agent, BrowserProfile, ChatOpenAI

    llm = ChatOpenAI(model=a.model, base_url=a.base_url, api_key=os.environ["OPENAI_API_KEY"], max_retries=1,
                     timeout=600, max_completion_tokens=a.max_tokens)
    data_dir = Path(os.environ.get("HOME", ".")) / ".browser-use-profile"
    profile = BrowserProfile(executable_path=a.chromium, headless=True, chromium_sandbox=False,
                             enable_default_extensions=False, user_data_dir=str(data_dir),
                             args=["--disable-dev-shm-usage", "--no-first-run", "--disable-sync",
                                   "--disable-background-networking", "--disable-component-update"])
    agent = Agent(task=a.task_file.read_text(), llm=llm, browser_profile=profile, use_judge=False,
                  use_vision=False, directly_open_url=False, enable_planning=False,
                  file_system_path=str(Path.cwd() / ".browser-use-files"), calculate_cost=False,
                  enable_signal_handler=False)
    history = await agent.run(max_steps=a.max_steps)
    return {"final": history.final_result(), "steps": len(history.history), "done": history.is_done(),
            "success": history.is_successful(), "urls": [u for u in history.urls() if u]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=1024)
    a = ap.parse_args()
    try:
        out = asyncio.run(run(a))
    except Exception as e:
        print(f"browser-use: agent run failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
