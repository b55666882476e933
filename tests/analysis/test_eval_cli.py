"""`forge eval` end to end on the CPU default: the real react harness in a local sandbox, the real proxy,
a scripted policy, task-directory tasks with real verifiers; then `forge report` / `forge compare` on
its output directory."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app

HELLO_VERIFY = """#!/bin/sh
W="$1"; e=0; c=0
[ -f "$W/hello.txt" ] && e=1
[ "$(cat "$W/hello.txt" 2>/dev/null)" = "hi" ] && c=1
echo "{\\"reward\\": $c, \\"rewards\\": {\\"file_exists\\": $e, \\"content_ok\\": $c}}"
"""

SCRIPT = """
tasks:
  hello:
    - shell: "echo hi > hello.txt"
    - tool: {name: read_file, arguments: {path: hello.txt}}
    - text: "Created hello.txt."
  kernel:
    - shell: "unamee -r > kernel.txt"
    - text: "I could not do it."
  train-only:
    - text: "never run: not in the eval split"
final: "Done."
"""


def _task(root: Path, tid: str, toml: str, instruction: str, verify: str) -> None:
    d = root / tid
    d.mkdir(parents=True)
    (d / "task.toml").write_text(f'id = "{tid}"\n' + toml)
    (d / "instruction.md").write_text(instruction)
    (d / "verify.sh").write_text(verify)
    os.chmod(d / "verify.sh", 0o755)


@pytest.fixture(scope="module")
def eval_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("openai", reason="the react harness needs the openai package")
    root = tmp_path_factory.mktemp("eval")
    tasks = root / "tasks"
    _task(tasks, "hello", 'split = "eval"\ncategory = "files"\ntimeout_s = 60\n'
          'required_tools = ["shell", "read_file"]\nsubgoals = ["file_exists", "content_ok"]\n',
          "Create hello.txt containing hi.", HELLO_VERIFY)
    _task(tasks, "kernel", 'split = "eval"\ncategory = "shell"\ntimeout_s = 60\nexit_code_reward = true\n',
          "Write the kernel version into kernel.txt.", '#!/bin/sh\ntest -s "$1/kernel.txt"\n')
    _task(tasks, "train-only", 'split = "train"\nexit_code_reward = true\n', "x", "#!/bin/sh\nexit 0\n")
    (root / "script.yaml").write_text(SCRIPT)
    out = root / "out"
    res = CliRunner().invoke(app, [
        "eval", "--harness", "react", "--env", str(tasks), "--backend", f"scripted:{root / 'script.yaml'}",
        "--trials", "2", "--out", str(out), "--json",
    ])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    summary = json.loads(res.output[res.output.index("{"):])
    assert summary == json.loads((out / "eval.json").read_text())
    return out


def test_eval_scores(eval_out: Path) -> None:
    s = json.loads((eval_out / "eval.json").read_text())
    assert (s["k"], s["tasks"], s["trials"]) == (2, 2, 4), s["statuses"]
    assert s["statuses"] == {"success": 2, "policy_failure": 2}
    by = {t["task_id"]: t for t in s["per_task"]}
    assert set(by) == {"hello", "kernel"}  # the train split is not evaluated
    assert (by["hello"]["pass_at_k"], by["hello"]["pass_hat_k"], by["hello"]["mean_reward"]) == (1.0, 1.0, 1.0)
    assert (by["kernel"]["pass_at_k"], by["kernel"]["pass_hat_k"]) == (0.0, 0.0)
    assert (s["pass_at_k"], s["pass_hat_k"], s["pass_at_1"]) == (0.5, 0.5, 0.5)
    assert {c["category"]: c["pass_at_k"] for c in s["categories"]} == {"files": 1.0, "shell": 0.0}


def test_eval_behaviour_from_real_recorded_calls(eval_out: Path) -> None:
    b = json.loads((eval_out / "eval.json").read_text())["behaviour"]
    assert b["rollouts"] == 4
    assert b["generic_shell_share"] == pytest.approx(2 / 3)  # hello: shell + read_file; kernel: shell
    # all 4 rollouts write (kernel redirects into kernel.txt); only hello's 2 read it back
    assert b["self_verification_rate"] == 0.5
    assert b["required_tool_coverage"] == 1.0 and b["subgoal_completion"] == 1.0
    assert b["error_recovery_rate"] == 0.0  # `unamee` fails and the agent gives up
    assert b["steps_per_task"] == 1.5 and b["tokens_per_task"] > 100


def test_eval_dir_feeds_report_and_compare(eval_out: Path, tmp_path: Path) -> None:
    lines = (eval_out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(ln)["metadata"]["category"] in ("files", "shell") for ln in lines)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(eval_out), "--out", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert html.count("<article") == 4 and "read_file" in html and "pass@2" in html
    res = CliRunner().invoke(app, ["compare", str(eval_out), str(eval_out), "--json"])
    rows = json.loads(res.output)
    assert rows[0]["pass_at_k"] == 0.5 and rows[0]["harness"] == "react"


def test_report_decodes_tokens_with_the_real_tokenizer(eval_out: Path, tmp_path: Path) -> None:
    """The eval's calls were tokenized by SmolLM2's tokenizer: decoding them shows the policy's
    tool call inside a trained span and the harness's tool result inside a context span."""
    pytest.importorskip("transformers")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(eval_out), "--out", str(out), "--tokenizer", "smollm2-135m"])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    html = out.read_text()
    assert "tokens decoded with the run" in html
    trained = re.findall(r'<span class="tok trained"[^>]*>(.*?)</span>', html, re.S)
    context = re.findall(r'<span class="tok ctx"[^>]*>(.*?)</span>', html, re.S)
    assert any("echo hi &gt; hello.txt" in t for t in trained), trained[:3]
    assert any("Create hello.txt containing hi." in c for c in context)
    assert not any("Create hello.txt containing hi." in t for t in trained)


def test_eval_on_the_claw_environment_with_reference_solutions(tmp_path: Path) -> None:
    """The built-in claw tasks (real services, real verifiers) through react, replaying the tasks'
    reference solutions (`--backend reference`): every trial passes and the HTTP capability is used."""
    pytest.importorskip("openai", reason="the react harness needs the openai package")
    from openforge.plugins import make_environment

    env = make_environment("claw")
    http_task = next(t for t in env.tasks("eval") if "http" in t.required_tools and env.reference_solution(t))
    file_task = next(t for t in env.tasks("eval") if t.required_tools == ("shell",) and env.reference_solution(t))
    out = tmp_path / "claw"
    res = CliRunner().invoke(app, [
        "eval", "--harness", "react", "--env", "claw", "--backend", "reference", "--trials", "2",
        "--task", http_task.id, "--task", file_task.id, "--out", str(out), "--json",
    ])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    s = json.loads((out / "eval.json").read_text())
    assert s["statuses"] == {"success": 4}, s["per_task"]
    assert (s["pass_at_k"], s["pass_hat_k"]) == (1.0, 1.0)
    assert s["behaviour"]["required_tool_coverage"] == 1.0  # shell + http (curl) both used
    assert s["behaviour"]["generic_shell_share"] == 1.0
    assert s["behaviour"]["subgoal_completion"] == 1.0  # the verifier's named checks are the subgoals
