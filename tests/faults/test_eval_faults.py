"""`forge eval --faults` on the claw tasks with their reference solutions replayed (the real react
harness, proxy and sandboxes): the fault metrics in eval.json, and `forge compare` / `forge report`
showing them with and without faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app

TASKS = ["--task", "files-count-lines", "--task", "sqlite-count-active"]


def _eval(out: Path, *extra: str) -> dict:
    res = CliRunner().invoke(app, ["eval", "-H", "react", "-e", "claw", "-b", "reference", "--split", "all", *TASKS,
                                   "-k", "2", "-j", "2", "--out", str(out), "--json", *extra])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    return json.loads((out / "eval.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("openai")
    root = tmp_path_factory.mktemp("evalfaults")
    clean = _eval(root / "clean")
    faulty = _eval(root / "faulty", "--faults", "[{kind: permission_denied}]")
    return root, clean, faulty


def test_eval_reports_fault_metrics(runs):
    root, clean, faulty = runs
    assert clean["pass_at_1"] == 1.0 and clean["behaviour"]["fault_recovery_rate"] is None
    b = faulty["behaviour"]
    # the reference solutions read the file made unreadable, and do not chmod it: met, not recovered
    assert faulty["pass_at_1"] == 0.0 and b["fault_met_rate"] == 1.0 and b["fault_recovery_rate"] == 0.0
    assert b["pass_rate_with_faults"] == 0.0 and b["pass_rate_without_faults"] is None
    trajs = [json.loads(ln) for ln in (root / "faulty" / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 4 and all(t["metadata"]["faults"]["met"] == 1 for t in trajs)
    assert {t["metadata"]["faults"]["injected"][0]["target"] for t in trajs} == {"data.txt", "app.db"}


def test_fault_options_are_checked():
    res = CliRunner().invoke(app, ["eval", "-H", "react", "-e", "claw", "-b", "reference", "--faults", "{fraction: 3}"])
    assert res.exit_code != 0 and "--faults.fraction" in f"{res.output}{res.exception}", res.output
    res = CliRunner().invoke(app, ["eval", "-H", "react", "-e", "claw", "-b", "reference", "--fault-fraction", "0.5"])
    assert res.exit_code != 0 and "needs --faults" in f"{res.output}{res.exception}", res.output


def test_compare_and_report_show_faults(runs, tmp_path):
    root, _, _ = runs
    res = CliRunner().invoke(app, ["compare", str(root / "clean"), str(root / "faulty")])
    assert res.exit_code == 0, res.output
    assert "fault recovery" in res.output and "pass rate with faults" in res.output
    res = CliRunner().invoke(app, ["report", str(root / "faulty"), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "r.html").read_text()
    assert "fault recovery" in html and "faults met" in html
    res = CliRunner().invoke(app, ["compare", str(root / "clean"), str(root / "clean")])
    assert "fault recovery" not in res.output  # no run injected faults: no fault rows
