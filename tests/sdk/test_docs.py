"""docs/sdk.md is executable: every code block in it is tested, and the examples it shows run end
to end as a new user would run them — ``forge rollout``, ``forge eval``, a ``Session`` in Python, a
``test``-preset training step (``heavy``), and the same classes by entry point from an installed
package. Markers before each block say how: ``file PATH`` (the block is that file, verbatim),
``excerpt PATH`` (the block appears in that file), ``run`` (a Python block, executed), ``shell``
(executed by bash), ``heavy`` (a Python block, executed by the heavy test)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "sdk.md"
FENCE = re.compile(r"(?:<!-- sdk-test: (?P<kind>\w+)(?: (?P<arg>\S+))? -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```$",
                   re.S | re.M)
KINDS = {"file", "excerpt", "run", "shell", "heavy"}


def blocks(kind: str | None = None) -> list[dict]:
    found = [m.groupdict() for m in FENCE.finditer(DOC.read_text())]
    return [b for b in found if kind is None or b["kind"] == kind]


def test_every_block_says_how_it_is_tested():
    found = blocks()
    assert len(found) >= 8
    untested = [b["body"][:60] for b in found if b["kind"] not in KINDS]
    assert untested == [], f"code blocks of docs/sdk.md without a <!-- sdk-test: ... --> marker: {untested}"


def test_file_blocks_are_the_example_files():
    files = blocks("file")
    assert {b["arg"] for b in files} == {"examples/custom_environment.py", "examples/custom_harness/harness.py",
                                         "examples/custom_harness/agent.py"}
    for b in files:
        assert b["body"] == (REPO / b["arg"]).read_text(), f"docs/sdk.md's copy of {b['arg']} differs from the file"
    for b in blocks("excerpt"):
        assert b["body"] in (REPO / b["arg"]).read_text(), f"docs/sdk.md's excerpt of {b['arg']} is not in it"


@pytest.fixture
def user_dir(tmp_path):
    """A folder laid out like the repository root for the docs' commands (``examples/``), and an env
    in which ``forge`` and ``python`` use this checkout's openforge (whatever is installed)."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    forge = bin_dir / "forge"
    forge.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.path.insert(0, {str(REPO)!r})\n"
                     "runpy.run_module('openforge.cli.main', run_name='__main__')\n")
    forge.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", NO_COLOR="1", COLUMNS="200")
    return tmp_path, env


def _python(block: str, cwd: Path, env: dict, name: str, timeout: float) -> str:
    script = cwd / f"{name}.py"
    script.write_text(block)
    env = {**env, "PYTHONPATH": f"examples{os.pathsep}{REPO}"}  # the docs' PYTHONPATH=examples, and this checkout
    r = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout


@pytest.mark.timeout(300)
def test_python_blocks_run(user_dir):
    cwd, env = user_dir
    runs = blocks("run")
    assert len(runs) == 2
    partial = _python(runs[0]["body"], cwd, env, "partial", 120)
    assert "reward=0.0" in partial and "'report': 0.0" in partial, partial
    session = _python(runs[1]["body"], cwd, env, "session", 240)
    assert session.split()[:2] == ["success", "1.0"], session


@pytest.mark.timeout(600)
def test_shell_block_runs_rollout_and_eval(user_dir):
    cwd, env = user_dir
    (shell,) = blocks("shell")
    r = subprocess.run(["bash", "-euc", shell["body"]], cwd=cwd, env=env, capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "sum-17-25" in r.stdout and "6 tasks" in r.stdout.replace("arith: ", "")  # forge env tasks
    traj = json.loads((cwd / "runs" / "sdk-rollout" / "trajectory.json").read_text())
    assert traj["status"] == "success" and traj["reward"] == 1.0 and traj["harness"] == "my-agent", traj["error"]
    evaluated = [json.loads(line) for line in (cwd / "runs" / "sdk-eval" / "trajectories.jsonl").read_text().splitlines()]
    assert sorted((t["task_id"], t["status"]) for t in evaluated) == [("sum-17-25", "success"), ("sum-8-34", "success")]


@pytest.mark.timeout(600)
def test_entry_points_of_the_installed_examples(user_dir):
    """``pip install ./examples`` (here: into a folder on PYTHONPATH) registers ``my-agent`` and
    ``arith``; the short names then run the same rollout."""
    cwd, env = user_dir
    src = cwd / "src"
    src.mkdir()
    for name in ("pyproject.toml", "custom_environment.py"):
        shutil.copy(REPO / "examples" / name, src / name)
    shutil.copytree(REPO / "examples" / "custom_harness", src / "custom_harness",
                    ignore=shutil.ignore_patterns("__pycache__"))
    site = cwd / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    if pip.returncode != 0 and "No module named" in pip.stderr:
        pytest.skip(f"cannot build the examples package here: {pip.stderr.strip()[-300:]}")
    assert pip.returncode == 0, pip.stderr[-2000:]
    env = {**env, "PYTHONPATH": str(site)}
    listed = subprocess.run(["forge", "harness", "list", "--json"], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "my-agent" in {h["name"] for h in json.loads(listed.stdout)}
    r = subprocess.run(["forge", "rollout", "-H", "my-agent", "-e", "arith", "--task", "sum-17-25", "--backend",
                        "reference", "--out", "runs/ep"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    traj = json.loads((cwd / "runs" / "ep" / "trajectory.json").read_text())
    assert (traj["status"], traj["environment"], traj["harness"]) == ("success", "arith", "my-agent"), traj["error"]


@pytest.mark.heavy(minutes=4)  # 2 min here alone (2026-12-03); CI runs ~1.5x slower
@pytest.mark.timeout(1800)
def test_heavy_block_trains_one_step(user_dir):
    """The docs' ``openforge.run(recipe="claw-grpo", preset="test")`` with the custom environment and
    harness: an SFT warm-start on the reference solutions, then a GRPO step on SmolLM2 whose rollouts
    are all trainable — a rollout in which the model wrote no answer.txt is a policy_failure, not an
    env_error."""
    cwd, env = user_dir
    (heavy,) = blocks("heavy")
    out = _python(heavy["body"], cwd, env, "train", 1700)
    run_dir = cwd / "runs" / "sdk-train"
    assert str(run_dir.name) in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 1, summary
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    statuses = [s.get("statuses") or s.get("rollout_statuses") or {} for s in steps if s.get("phase") != "sft"]
    assert statuses and all(st for st in statuses), steps
    untrainable = {k: v for st in statuses for k, v in st.items()
                   if k in ("env_error", "harness_error", "infra_error") and v}
    assert untrainable == {}, statuses
