"""browser environment: reference solutions pass, doing nothing / wrong actions fail (in real
sandboxes, the app reached through the sandbox's loopback forwarder); a real Chromium renders it."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from testdeps import missing, smollm2_tokenizer

from openforge.envs.browser import BrowserEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment

ENV = BrowserEnvironment()


@pytest.fixture
async def launcher(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    yield la
    await la.aclose()


async def _run(launcher, task, cmds, *, check=True):
    sbx = await launcher.start(SandboxSpec(rollout_id=f"b-{task.id}", task=task, proxy_url="", api_key="k",
                                           hidden_paths=ENV.hidden_paths(task)))
    try:
        await ENV.setup(task, sbx)
        assert "{url}" not in ENV.instruction(task, sbx) and "http://127.0.0.1:" in ENV.instruction(task, sbx)
        outs = []
        for c in cmds:
            r = await sbx.exec(["sh", "-c", c], env=ENV.harness_env(task, sbx), timeout_s=120)
            assert not check or r.returncode == 0, (c, r.stderr)
            outs.append(r.stdout)
        return await ENV.verify(task, sbx), outs
    finally:
        await ENV.teardown(task, sbx)
        await sbx.close()


def test_inventory():
    assert isinstance(make_environment("browser"), BrowserEnvironment)
    assert len(ENV.tasks()) >= 8 and ENV.tasks("eval") and ENV.tasks("train")
    assert {t.category for t in ENV.tasks()} == {"form", "shop", "navigation"}


async def test_reference_passes_nothing_fails(launcher):
    async def both(task):
        good, _ = await _run(launcher, task, ENV.reference_solution(task))
        bad, _ = await _run(launcher, task, [])
        return task.id, good, bad

    res = await asyncio.gather(*(both(t) for t in ENV.tasks()))
    assert [(i, g.reward) for i, g, _ in res if g.reward != 1.0] == []
    assert [(i, b.reward) for i, _, b in res if b.reward != 0.0] == []


async def test_wrong_actions_fail(launcher):
    post = "curl -sf -o /dev/null -X POST --data '{}' \"$WEB_URL{}\""
    cases = {
        "web-shop-cheapest-book": [post.format("product=3&qty=1", "/cart/add"), post.format("", "/checkout")],
        "web-signup-pro": [post.format("username=grace&plan=free&agree=yes", "/signup")],
        "web-search-like": [post.format("", "/article/3/like")],
        "web-shop-mugs": [post.format("product=1&qty=2", "/cart/add")],  # never checked out
    }
    for tid, cmds in cases.items():
        res, _ = await _run(launcher, ENV.task(tid), cmds)
        assert res.reward == 0.0, (tid, res)


async def test_pages_are_navigable_html(launcher):
    res, outs = await _run(launcher, ENV.task("web-search-like"), [
        "curl -sf \"$WEB_URL/search?q=penguin\"", "curl -sf \"$WEB_URL/shop?category=Books\""])
    assert "/article/1" in outs[0] and "/article/3" in outs[0] and "/article/2" not in outs[0]
    assert "Dune" in outs[1] and "Blue Mug" not in outs[1] and res.reward == 0.0


@pytest.mark.browser
async def test_chromium_renders_the_app_inside_the_sandbox(launcher):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        missing("Chromium is not installed (apt-get install chromium)")
    _, outs = await _run(launcher, ENV.task("web-shop-mugs"), [
        f"d=$(mktemp -d /tmp/chr.XXXXXX); TMPDIR=$d {chromium} --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
        "--user-data-dir=$d --dump-dom \"$WEB_URL/product/1\" 2>&1 | tail -40"], check=False)
    assert "Add to cart" in outs[0] and "Blue Mug" in outs[0]


@pytest.mark.browser
async def test_browser_use_harness_opens_an_article(tmp_path):
    """The real browser-use Agent + Chromium, scripted, against the browser environment's app."""
    import json

    from openforge.harnesses.browser_use import BrowserUseHarness
    from openforge.runner.rollout import run_rollout

    harness = BrowserUseHarness(max_steps=4)
    if not harness.is_installed():
        missing(harness.describe()["detail"])
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    if la.isolation != "bwrap":
        pytest.skip("the scripted URL assumes bubblewrap's fixed in-sandbox ports")
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer

    tok = smollm2_tokenizer()
    url = "http://127.0.0.1:18001/article/1"  # the proxy is the sandbox's first exposed port, the app the second
    nav = {"thinking": "Open it.", "evaluation_previous_goal": "Start", "memory": "", "next_goal": "Open the article",
           "action": [{"navigate": {"url": url, "new_tab": False}}]}
    done = {"thinking": "Open.", "evaluation_previous_goal": "Opened. Verdict: Success", "memory": "", "next_goal": "Finish",
            "action": [{"done": {"text": "Emperor penguins breed in winter.", "success": True, "files_to_display": []}}]}
    turns = [{"text": json.dumps(nav)}, {"text": json.dumps(done)}]
    async with ProxyServer(ScriptedBackend({"turns": turns}, tokenizer=tok), uds=str(tmp_path / "p.sock")) as proxy:
        traj = await run_rollout(harness=harness, environment=ENV, task=ENV.task("web-open-article"), launcher=la,
                                 proxy=proxy, budget_s=240)
    await la.aclose()
    assert traj.status.value == "success" and traj.reward == 1.0, (traj.error, traj.metadata.get("harness_stderr"))
    # the app's address reached the model (in its first call's task, or later: under load browser-use may
    # spend a step on a slow browser start, and its first call then ends with a step-budget warning)
    assert any("127.0.0.1:18001" in str(c.request["messages"]) for c in traj.calls)
