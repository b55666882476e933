"""``computer-use``: an Anthropic-style computer-use agent loop on a real X display.

Owns: the loop (Anthropic Messages through the real ``anthropic`` SDK, beta
``computer-use-2025-01-24``, the ``computer_20250124`` tool; screenshots come back as ``image``
tool results), the actions on the display (``xdotool`` for mouse and keyboard, Pillow's X grab for
PNG screenshots), starting a private ``Xvfb`` when no ``DISPLAY`` is given, and
:class:`ComputerUseHarness`, which runs the loop as ``python -m openforge.harnesses.computer_use``
inside the sandbox. The process prints one JSON line at the end: ``{"final", "turns", "stop"}``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..harness import RolloutContext
from .cli import PythonLoopHarness

__all__ = ["ComputerUseHarness", "Display", "main"]

SYSTEM_PROMPT = ("You control a Linux desktop through the computer tool (screenshot, click, type, key). "
                 "Take a screenshot first. Answer in plain text when the task is done.")
BETA = "computer-use-2025-01-24"


class Display:
    """A real X display: a private Xvfb (started here) or an existing ``DISPLAY``."""

    def __init__(self, width: int, height: int, display: str | None = None):
        self.width, self.height = width, height
        self.proc: subprocess.Popen[bytes] | None = None
        self.name = display or self._start_xvfb()

    def _start_xvfb(self) -> str:
        xvfb = shutil.which("Xvfb")
        if not xvfb:
            raise RuntimeError("Xvfb is not installed (apt-get install xvfb)")
        r, w = os.pipe()
        self.proc = subprocess.Popen([xvfb, "-displayfd", str(w), "-screen", "0", f"{self.width}x{self.height}x24",
                                      "-nolisten", "tcp", "-nolisten", "local", "-noreset"], pass_fds=(w,),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(w)
        with os.fdopen(r) as f:
            num = f.readline().strip()  # Xvfb writes the display number once it accepts clients
        if not num:
            raise RuntimeError("Xvfb did not start")
        return f":{num}"

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def xdotool(self, *args: str) -> str:
        p = subprocess.run(["xdotool", *args], env={**os.environ, "DISPLAY": self.name},
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"xdotool {' '.join(args)} failed: {p.stderr.strip()}")
        return p.stdout

    def screenshot_png(self) -> bytes:
        from PIL import ImageGrab

        img = ImageGrab.grab(xdisplay=self.name)
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        return buf.getvalue()


def do_action(disp: Display, inp: dict[str, Any], *, screenshot_after: bool) -> list[dict[str, Any]]:
    """Perform one ``computer`` action; return the tool_result content blocks."""
    action = inp.get("action")
    text: str | None = None
    coord = inp.get("coordinate")
    xy = [str(int(c)) for c in coord] if isinstance(coord, (list, tuple)) and len(coord) == 2 else None
    clicks = {"left_click": ("1", "1"), "right_click": ("3", "1"), "middle_click": ("2", "1"),
              "double_click": ("1", "2"), "triple_click": ("1", "3")}
    if action == "screenshot":
        pass
    elif action in clicks:
        button, repeat = clicks[action]
        if xy:
            disp.xdotool("mousemove", "--sync", *xy)
        disp.xdotool("click", "--repeat", repeat, button)
        text = f"{action} done"
    elif action == "mouse_move" and xy:
        disp.xdotool("mousemove", "--sync", *xy)
        text = "moved"
    elif action == "type" and isinstance(inp.get("text"), str):
        disp.xdotool("type", "--delay", "12", "--", inp["text"])
        text = "typed"
    elif action == "key" and isinstance(inp.get("text"), str):
        disp.xdotool("key", "--", *inp["text"].split())
        text = "pressed"
    elif action == "scroll":
        if xy:
            disp.xdotool("mousemove", "--sync", *xy)
        button = {"up": "4", "down": "5", "left": "6", "right": "7"}.get(str(inp.get("scroll_direction")), "5")
        disp.xdotool("click", "--repeat", str(int(inp.get("scroll_amount", 3))), button)
        text = "scrolled"
    elif action == "wait":
        time.sleep(min(float(inp.get("duration", 1)), 10))
        text = "waited"
    elif action == "cursor_position":
        loc = dict(kv.split(":") for kv in disp.xdotool("getmouselocation").split() if ":" in kv)
        return [{"type": "text", "text": f"X={loc.get('x')},Y={loc.get('y')}"}]
    else:
        raise ValueError(f"unsupported or malformed computer action: {json.dumps(inp)[:200]}")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if action == "screenshot" or screenshot_after:
        data = base64.b64encode(disp.screenshot_png()).decode()
        blocks.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
    return blocks


def agent_loop(task: str, *, model: str, base_url: str, api_key: str, disp: Display, max_turns: int,
               max_tokens: int, screenshot_after: bool) -> dict[str, Any]:
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=2, timeout=600)
    tools = [{"type": "computer_20250124", "name": "computer", "display_width_px": disp.width,
              "display_height_px": disp.height, "display_number": int(disp.name.lstrip(":").split(".")[0])}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for turn in range(1, max_turns + 1):
        resp = client.beta.messages.create(model=model, max_tokens=max_tokens, system=SYSTEM_PROMPT,
                                           messages=messages, tools=tools, betas=[BETA])  # type: ignore[arg-type]
        content = [b.model_dump(exclude_none=True) for b in resp.content]
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in resp.content if b.type == "tool_use"]
        if not uses:
            final = "".join(getattr(b, "text", "") for b in resp.content if b.type == "text")
            return {"final": final, "turns": turn, "stop": "answer"}
        results = []
        for u in uses:
            try:
                if u.name != "computer":
                    raise ValueError(f"unknown tool {u.name!r}; only 'computer' is available")
                blocks, is_error = do_action(disp, dict(u.input), screenshot_after=screenshot_after), False
            except (ValueError, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                blocks, is_error = [{"type": "text", "text": f"error: {e}"}], True
            results.append({"type": "tool_result", "tool_use_id": u.id, "content": blocks, "is_error": is_error})
        messages.append({"role": "user", "content": results})
    return {"final": None, "turns": max_turns, "stop": "max_turns"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m openforge.harnesses.computer_use", description=__doc__)
    ap.add_argument("--task-file", type=Path, required=True)
    ap.add_argument("--model", default=os.environ.get("OPENFORGE_MODEL", "openforge-policy"))
    ap.add_argument("--base-url", default=os.environ.get("ANTHROPIC_BASE_URL"))
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--height", type=int, default=768)
    ap.add_argument("--max-turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--screenshot-after-action", action=argparse.BooleanOptionalAction, default=True)
    a = ap.parse_args(argv)
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not a.base_url or not key:
        print("computer-use: need --base-url (or ANTHROPIC_BASE_URL) and ANTHROPIC_API_KEY", file=sys.stderr)
        return 2
    try:
        disp = Display(a.width, a.height, os.environ.get("DISPLAY") or None)
    except (RuntimeError, OSError) as e:
        print(f"computer-use: cannot open a display: {e}", file=sys.stderr)
        return 4
    try:
        out = agent_loop(a.task_file.read_text(), model=a.model, base_url=a.base_url, api_key=key, disp=disp,
                         max_turns=a.max_turns, max_tokens=a.max_tokens, screenshot_after=a.screenshot_after_action)
    except Exception as e:  # the model API failed
        print(f"computer-use: model API call failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    finally:
        disp.close()
    out["display"] = disp.name
    print(json.dumps(out))
    return 0


class ComputerUseHarness(PythonLoopHarness):
    """Runs the computer-use loop inside the sandbox (a private Xvfb unless ``ctx.env`` has DISPLAY)."""

    name = "computer-use"
    wire_api = "messages"
    install_hint = "forge harness install computer-use  (apt-get install xvfb xdotool; pip install anthropic pillow)"

    def __init__(self, *, python: str | None = None, width: int = 1024, height: int = 768, max_turns: int = 10,
                 screenshot_after_action: bool = True, **kw: Any):
        super().__init__(python=python, **kw)
        self.width, self.height, self.max_turns = width, height, max_turns
        self.screenshot_after_action = screenshot_after_action

    def check_installed(self) -> None:
        import importlib.util

        from ..core.errors import HarnessNotInstalled

        missing = [t for t in ("Xvfb", "xdotool") if not shutil.which(t)]
        missing += [m for m in ("anthropic", "PIL") if importlib.util.find_spec(m) is None]
        if missing:
            raise HarnessNotInstalled(f"computer-use needs {', '.join(missing)}: {self.install_hint}")

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        return [exe, "-m", "openforge.harnesses.computer_use", "--task-file", self.task_file(ctx),
                "--model", ctx.model, "--base-url", ctx.anthropic_base_url, "--width", str(self.width),
                "--height", str(self.height), "--max-turns", str(self.max_turns),
                "--screenshot-after-action" if self.screenshot_after_action else "--no-screenshot-after-action",
                *self.extra_args]


if __name__ == "__main__":
    sys.exit(main())
