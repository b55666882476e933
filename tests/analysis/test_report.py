"""`forge report`: one self-contained HTML file, checked as a document and in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from testdeps import missing
from typer.testing import CliRunner

from openforge.analysis.report import build_report, write_report
from openforge.analysis.rundir import load_run
from openforge.cli.main import app

from .demo_run import write_demo_run
from .factory import decode

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_run(tmp_path_factory.mktemp("runs") / "demo")


@pytest.fixture(scope="module")
def report(demo: Path) -> Path:
    return write_report(load_run(demo), demo / "report.html", detokenize=decode)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_report_is_self_contained(report: Path) -> None:
    html = report.read_text()
    p = _Tags()
    p.feed(html)
    for tag, attrs in p.tags:
        for key in ("src", "href", "srcset", "action", "data"):
            v = attrs.get(key)
            assert v is None or not re.match(r"^(https?:)?//", v), f"<{tag} {key}={v}> would fetch from the network"
        assert tag not in ("link", "iframe", "object", "embed"), f"external resource tag <{tag}>"
        if tag == "script":
            assert "src" not in attrs
    assert "@import" not in html and "url(http" not in html


def test_report_content(report: Path, demo: Path) -> None:
    html = report.read_text()
    run = load_run(demo)
    p = _Tags()
    p.feed(html)
    classes = [(t, a.get("class") or "") for t, a in p.tags]
    # one reward point and one pass-rate point per metrics.jsonl row
    assert html.count('data-series="reward mean"') == len(run.metrics) + 1  # + its polyline
    assert html.count('class="pt" data-series="pass rate"') == len(run.metrics)
    assert sum(t == "article" for t, _ in classes) == len(run.trajectories)
    assert sum(c == "tok trained" for _, c in classes) > 0 and sum(c == "tok ctx" for _, c in classes) > 0
    assert "history_rewritten" in html and "infra_error" in html
    assert "sandbox pod evicted" in html  # the infra failure's error is shown


def test_long_context_is_elided_but_trained_tokens_are_not(tmp_path: Path) -> None:
    from .factory import traj

    t = traj([("bash", {"command": "cat big.log"}, "x" * 5000), ("read", {"path": "a"}, "y")], token_ids=True)
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "t.json").write_text(t.to_json())
    html = build_report(load_run(tmp_path), detokenize=decode)
    assert "characters elided" in html
    assert '{&#34;name&#34;: &#34;read&#34;, &#34;arguments&#34;: {&#34;path&#34;: &#34;a&#34;}}' in html


def test_token_ids_shown_without_tokenizer(tmp_path: Path) -> None:
    from .factory import traj

    t = traj([("bash", {"command": "ls"}, "a")], token_ids=True)
    (tmp_path / "t.json").write_text(t.to_json())
    html = build_report(load_run(tmp_path / "t.json"))
    trained = t.calls[0].output_ids
    assert " ".join(map(str, trained)) in html and "token ids shown" in html


def test_forge_report_cli(demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(demo), "--out", str(out), "--max-trajectories", "5"])
    assert res.exit_code == 0, res.output
    assert out.is_file() and out.read_text().count("<article") == 5
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code != 0 and "no such run directory" in str(res.exception or res.output)


# ------------------------------------------------------------------------------ in Chromium


def _chromium() -> str | None:
    for c in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if c and os.path.exists(c):
            return c
    return None


@pytest.mark.browser
def test_report_in_headless_chromium(report: Path, demo: Path, tmp_path: Path) -> None:
    exe = _chromium()
    if exe is None:
        missing("Chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    run = load_run(demo)
    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri())
            page.wait_for_load_state("load")
            # curves: the SVG has one rendered point per training step, laid out left to right
            xs = page.eval_on_selector_all('#chart-reward circle.pt', "els => els.map(e => e.getBBox().x)")
            assert len(xs) == len(run.metrics) and xs == sorted(xs) and xs[0] < xs[-1]
            assert page.locator('#chart-behaviour polyline').count() >= 3
            # status bar: one segment per status, widths proportional to the counts
            segs = page.eval_on_selector_all('svg.statusbar rect.seg',
                                             "els => els.map(e => [e.dataset.status, +e.dataset.count, e.getBBox().width])")
            counts = {s: n for s, n, _ in segs}
            assert counts == dict(Counter(str(t.status) for t in run.trajectories))
            widths = {s: w for s, _, w in segs}
            assert widths["success"] > widths["policy_failure"] > widths["infra_error"] > 0
            # statuses per step: one full-height column per training step, split by the step's counts
            cols = page.eval_on_selector_all('#chart-statuses rect.col',
                                             "els => els.map(e => [e.dataset.step, +e.dataset.count, e.getBBox().height])")
            heights: dict[str, float] = {}
            for step, _, h in cols:
                heights[step] = heights.get(step, 0.0) + h
            assert len(heights) == len(run.metrics)
            assert max(heights.values()) - min(heights.values()) < 1.0
            assert sum(n for _, n, _ in cols) == sum(sum(m["statuses"].values()) for m in run.metrics)
            # trajectory viewer: exactly one trajectory visible, its calls rendered
            visible = page.locator("article.traj:visible")
            assert visible.count() == 1
            first = run.trajectories and sorted(run.trajectories, key=lambda t: (t.metadata["step"], t.task_id, t.rollout_id))[0]
            assert visible.locator(".call").count() == len(first.calls)
            trained = visible.locator(".tok.trained")
            assert trained.count() == len(first.calls)  # one generated run per call (one segment)
            bg_trained = trained.first.evaluate("e => getComputedStyle(e).backgroundColor")
            bg_ctx = visible.locator(".tok.ctx").first.evaluate("e => getComputedStyle(e).backgroundColor")
            assert bg_trained != bg_ctx, "trained tokens must look different from context tokens"
            # clicking another row shows that trajectory
            row = page.locator("#traj-table tr[data-target]").nth(4)
            target = row.get_attribute("data-target")
            row.click()
            assert page.locator(f"#{target}").is_visible() and page.locator("article.traj:visible").count() == 1
            # the status filter keeps only matching rows and shows a matching trajectory
            page.select_option("#status-filter", "infra_error")
            shown = page.locator("#traj-table tr[data-target]:visible")
            assert shown.count() == 1
            art = page.locator("article.traj:visible")
            assert "infra_error" in art.inner_text() and "sandbox pod evicted" in art.inner_text()
            page.select_option("#status-filter", "")
            # a rewritten history is visible as a break reason
            rewritten = next(t for t in run.trajectories if any(str(s.break_reason) == "history_rewritten"
                                                                 for s in t.segments))
            dom_id = page.get_attribute(f'article[data-rollout="{rewritten.rollout_id}"]', "id")
            page.locator(f'#traj-table tr[data-target="{dom_id}"]').click()
            art = page.locator("article.traj:visible")
            assert art.get_attribute("data-rollout") == rewritten.rollout_id
            assert art.locator(".segment").count() == 2 and "history_rewritten" in art.inner_text()
            page.evaluate("window.scrollTo(0, 0)")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 20_000
            if os.environ.get("OPENFORGE_UPDATE_SCREENSHOT"):  # the README image
                shutil.copyfile(shot, REPO / "docs" / "img" / "report.png")
        finally:
            browser.close()
    assert all(u.startswith("file:") or u.startswith("data:") for u in requests), requests


def test_eval_directory_report_has_tasks_not_curves(tmp_path: Path) -> None:
    from openforge.analysis.passk import summarize_eval
    from openforge.runner.evaluation import EvalRequest, write_eval_dir

    from .factory import traj

    trajs = [traj([("bash", {"command": "ls"}, "a")], task_id=f"t{i % 2}", rollout_id=f"r{i}",
                  status="success" if i % 3 else "policy_failure", metadata={"trial": i // 2}) for i in range(6)]
    req = EvalRequest(harness="react", env="claw", backend="reference", trials=3)
    write_eval_dir(tmp_path, req, summarize_eval(trajs, k=3), trajs)
    html = build_report(load_run(tmp_path))
    assert 'id="curves"' not in html and 'id="chart-statuses"' not in html
    assert 'id="tasks"' in html and "pass@3" in html and "<th>trial</th>" in html


def _run_with_sft_and_idle_step(root: Path) -> Path:
    """A CPU run's metrics.jsonl: the SFT warm-start line, a step that trained, one that did not."""
    import json

    root.mkdir(parents=True)
    (root / "config.yaml").write_text("model:\n  name: smollm2-135m\nharness:\n  name: react\n")
    rows = [{"step": 0, "phase": "sft", "trained_tokens": 5120, "loss_last": 0.9, "cached": False},
            {"step": 1, "reward_mean": 0.1, "reward_std": 0.3, "pass_rate": 0.1, "statuses": {"success": 1},
             "train/loss": 0.25, "train/trained_tokens": 154.0},
            {"step": 2, "reward_mean": 0.0, "reward_std": 0.0, "pass_rate": 0.0, "statuses": {"policy_failure": 4},
             "train/skipped": 1.0, "train/trained_tokens": 0.0},
            {"step": 3, "reward_mean": 0.9, "reward_std": 0.3, "pass_rate": 0.9, "statuses": {"success": 4},
             "train/loss": 0.1, "trained_tokens": 349, "gradient_step": True}]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_sft_line_is_not_a_training_step_and_idle_steps_are_shown(tmp_path: Path) -> None:
    html = build_report(load_run(_run_with_sft_and_idle_step(tmp_path / "run")))
    card = re.search(r'<div class="v">(\d+)</div><div class="l">training steps</div>', html)
    assert card is not None and card.group(1) == "3"  # not 4: the SFT line is its own card
    assert re.search(r'id="sft-card"><div class="v">5120</div>', html)
    # trained tokens per step (and a red point at 0 for the step that trained nothing), loss per step
    assert [m for m in re.findall(r'data-series="trained tokens" data-x="([\d.]+)" data-y="([\d.]+)"', html)] == [
        ("1.0", "154.0"), ("3.0", "349.0")]
    assert re.findall(r'data-series="trained nothing" data-x="([\d.]+)" data-y="([\d.]+)"', html) == [("2.0", "0.0")]
    assert re.findall(r'class="pt" data-series="loss" data-x="([\d.]+)"', html) == ["1.0", "3.0"]
    assert 'id="idle-steps"' in html and "at step 2:" in html


def test_reward_band_stays_inside_the_reward_range(tmp_path: Path) -> None:
    from openforge.analysis.report import _curves

    html = _curves(load_run(_run_with_sft_and_idle_step(tmp_path / "run")))["reward"]
    # the band's lowest point is y=0 (mean 0.1 - std 0.3 clipped), its highest y=1 (0.9 + 0.3 clipped):
    # with a [0, 1] y axis the chart's tick labels stay 0 … 1
    ticks = re.findall(r'class="tick" x="\d+" y="[\d.]+" text-anchor="end">([-\d.]+)<', html)
    assert ticks[0] == "0" and ticks[-1] == "1", ticks


def test_diag_panel_plots_the_diag_metrics_and_shows_the_verdict(tmp_path: Path) -> None:
    import json

    root = tmp_path / "run"
    root.mkdir()
    (root / "config.yaml").write_text("model:\n  name: smollm2-135m\nharness:\n  name: react\n")
    rows = [{"step": i, "reward_mean": 0.1, "reward_std": 0.3, "pass_rate": 0.1, "statuses": {"success": 1},
             "gradient_step": True, "train/trained_tokens": 100.0, "diag/tied_share": 0.9, "diag/pass_spread": 0.1,
             "diag/entropy_est": 0.7, "diag/kl_step": 1e-3, "diag/clip_frac": 0.01, "diag/grad_norm": 0.4 + i,
             "diag/trained_tokens": 100.0} for i in (1, 2)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = build_report(load_run(root))
    for cid in ("chart-diag-shares", "chart-diag-grad", "chart-diag-kl", "chart-diag-entropy"):
        assert f'id="{cid}"' in html
    assert re.findall(r'data-series="grad_norm" data-x="([\d.]+)" data-y="([\d.]+)"', html) == [
        ("1.0", "1.4"), ("2.0", "2.4")]
    assert html.count('class="pt" data-series="tied groups"') == 2
    assert re.search(r'id="verdict"><b>verdict:</b> 90% of groups tied: raise group_size', html)


def test_run_without_diag_metrics_has_no_diag_panel(tmp_path: Path) -> None:
    html = build_report(load_run(_run_with_sft_and_idle_step(tmp_path / "run")))
    assert 'id="verdict"' not in html and "chart-diag" not in html
