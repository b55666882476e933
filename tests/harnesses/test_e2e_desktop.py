"""browser-use (real Agent + Debian Chromium) and the computer-use loop (real anthropic SDK, Xvfb,
xdotool) end to end against the real proxy, in a loopback-only sandbox. Marked ``browser``; each
skips with the reason when Chromium / Xvfb / the browser-use venv is missing."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import pytest
from e2e import assert_isolated, describe_failure, run_e2e, tool_calls
from testdeps import missing

from openforge.core.errors import HarnessError
from openforge.harnesses.browser_use import BrowserUseHarness
from openforge.harnesses.computer_use import ComputerUseHarness

pytestmark = pytest.mark.browser
PAGE = b"<html><head><title>Forge test page</title></head><body><h1>hello from loopback</h1></body></html>"


def _installed(h):
    try:
        h.check_installed()
    except HarnessError as e:
        missing(f"{h.name} is not installed here: {e}")
    return h


async def _page_server(path: str, hits: list[str]) -> asyncio.AbstractServer:
    """A tiny HTTP server on a Unix socket (exposed into the sandbox as a loopback port)."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            line = (await r.readline()).decode(errors="replace")
            while (await r.readline()) not in (b"\r\n", b""):
                pass
            hits.append(line.split(" ")[1] if " " in line else line)
            body = PAGE if "/hello.html" in line else b"not found"
            code = "200 OK" if "/hello.html" in line else "404 Not Found"
            w.write(f"HTTP/1.1 {code}\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n"
                    f"Connection: close\r\n\r\n".encode() + body)
            await w.drain()
        finally:
            w.close()

    return await asyncio.start_unix_server(handle, path)


async def test_browser_use_navigates_to_loopback_page(tmp_path, tokenizer):
    h = _installed(BrowserUseHarness(max_steps=4))
    url = "http://127.0.0.1:18500/hello.html"
    nav = {"thinking": "Open the page.", "evaluation_previous_goal": "Start", "memory": "",
           "next_goal": "Open the test page", "action": [{"navigate": {"url": url, "new_tab": False}}]}
    done = {"thinking": "The page is open.", "evaluation_previous_goal": "Page opened. Verdict: Success",
            "memory": "page says hello", "next_goal": "Finish",
            "action": [{"done": {"text": "The page says hello from loopback", "success": True,
                                 "files_to_display": []}}]}
    hits: list[str] = []
    sock = str(tmp_path / "page.sock")
    server = await _page_server(sock, hits)
    try:
        run = await run_e2e(h, [{"text": json.dumps(nav)}, {"text": json.dumps(done)}],
                            "Open the test page and report what it says.", tmp_path=tmp_path,
                            tokenizer=tokenizer, budget_s=240, expose={18500: sock})
    finally:
        server.close()
    assert run.result.ok, describe_failure(run)
    assert "/hello.html" in hits, (hits, describe_failure(run))
    assert run.result.final_text == "The page says hello from loopback", describe_failure(run)
    first = run.traj.calls[0]
    assert first.api == "chat" and first.request.get("response_format", {}).get("type") == "json_schema"
    assert json.loads(first.response["text"])["action"][0]["navigate"]["url"] == url
    later = json.dumps(run.traj.calls[1].request)
    assert "hello from loopback" in later or "Forge test page" in later  # the page state reached the model
    assert_isolated(run)


async def test_computer_use_screenshot_then_answer(tmp_path, tokenizer):
    h = _installed(ComputerUseHarness(width=800, height=600))
    script = [{"tool": {"name": "computer", "arguments": {"action": "screenshot"}}}, {"text": "I see an empty desktop."}]
    run = await run_e2e(h, script, "Take a screenshot and describe the screen.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=120)
    assert run.result.ok, describe_failure(run)
    assert run.result.final_text == "I see an empty desktop."
    assert tool_calls(run.traj) == [("computer", {"action": "screenshot"})]
    assert [c.api for c in run.traj.calls] == ["messages", "messages"]
    tools = run.traj.calls[0].request["tools"]
    assert tools[0]["type"] == "computer_20250124" and tools[0]["display_width_px"] == 800
    result = run.traj.calls[1].request["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is False
    img = result["content"][-1]
    assert img["type"] == "image" and img["source"]["media_type"] == "image/png"
    from PIL import Image

    png = Image.open(io.BytesIO(base64.b64decode(img["source"]["data"])))
    assert png.size == (800, 600)  # a real screenshot of the sandbox's own Xvfb display
    assert_isolated(run)
