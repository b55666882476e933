"""`forge eval` and `forge report` on the CPU default policy itself: SmolLM2-135M-Instruct served by the
transformers back-end, the react harness, a built-in claw task. Whatever the untrained model does,
the rollout must be scored (a policy outcome, not an infra error), its calls recorded token-exactly,
and the report must show them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.store import load_trajectories

pytestmark = pytest.mark.slow


def test_eval_and_report_with_the_cpu_default_model(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("openai")
    out = tmp_path / "eval"
    res = CliRunner().invoke(app, [
        "eval", "-h", "react", "-e", "claw", "-b", "transformers:smollm2-135m", "--split", "all",
        "--task", "files-create-hello", "-k", "1", "--budget-s", "300", "--json", "-o", str(out),
        "--harness-opt", "max_turns=2", "--harness-opt", "max_tokens=48",
    ])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    summary = json.loads((out / "eval.json").read_text())
    assert summary["tasks"] == 1
    assert summary["statuses"].keys() <= {"success", "policy_failure", "timeout"}, summary["statuses"]
    assert sum(summary["statuses"].values()) == 1

    (traj,) = load_trajectories(out / "trajectories.jsonl")
    assert traj.harness == "react" and traj.task_id == "files-create-hello"
    assert traj.calls, "the model was called through the proxy"
    assert all(c.exact and c.prompt_ids and c.output_ids for c in traj.calls)
    assert all(len(c.output_ids) <= 48 for c in traj.calls)  # the harness option reached the request
    traj.validate_segments()
    assert sum(len(s.call_indices) for s in traj.segments) >= 1

    html_path = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", str(out), "--out", str(html_path), "--tokenizer", "smollm2-135m"])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    html = html_path.read_text()
    assert traj.rollout_id in html
    trained = re.findall(r'<span class="tok trained"[^>]*>(.*?)</span>', html, re.S)
    assert trained, "the policy's generated tokens are shown as trained spans"
