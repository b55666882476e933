"""``forge eval`` is loud (issue 26): with no valid rollout it prints the first error (the verifier's or
setup's, with its detail) and exits 3 instead of 0; Ctrl-C (a real SIGINT to a subprocess) keeps the
finished rollouts, writes them as a partial summary marked ``interrupted`` and exits 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _task(root: Path, tid: str, *, setup: str | None = None, timeout_s: int = 60) -> None:
    d = root / tid
    d.mkdir(parents=True)
    (d / "task.toml").write_text(f'id = "{tid}"\nsplit = "eval"\ntimeout_s = {timeout_s}\nexit_code_reward = true\n')
    (d / "instruction.md").write_text(f"Do {tid}.")
    (d / "verify.sh").write_text('#!/bin/sh\ntest -f "$1/done.txt"\n')
    os.chmod(d / "verify.sh", 0o755)
    if setup is not None:
        (d / "setup.sh").write_text(setup)


def test_eval_with_no_valid_rollout_shows_the_first_error_and_exits_3(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    tasks = tmp_path / "tasks"
    _task(tasks, "broken", setup="echo 'setup: the fixture is missing' >&2\nexit 4\n")
    (tmp_path / "s.yaml").write_text("tasks:\n  broken:\n    - text: never reached\nfinal: Done.\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["eval", "-H", "react", "--env", str(tasks), "-b", f"scripted:{tmp_path / 's.yaml'}",
                                   "--trials", "2", "--out", str(out)])
    assert res.exit_code == 3, res.output  # before: 0
    text = " ".join(res.output.split())
    assert "first failed rollout: env_error on task broken" in text
    assert "setup.sh of broken failed (4): setup: the fixture is missing" in text
    assert "no valid rollout: 2 of 2 were not trainable (env_error=2)" in text
    assert "EnvironmentError_" not in res.output
    assert json.loads((out / "eval.json").read_text())["valid_trials"] == 0  # still written, for forge report


SCRIPT = """
tasks:
  fast:
    - shell: "echo ok > done.txt"
    - text: "Done."
  slow:
    - shell: "sleep 300"
    - text: "Done."
final: "Done."
"""


def _finished(db: Path) -> int:
    if not db.is_file():
        return 0
    from openforge.store import load_trajectories

    try:
        return len(load_trajectories(db))
    except Exception:  # the eval is writing it
        return 0


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_in_forge_eval_keeps_the_finished_rollouts(tmp_path: Path, sig: int, code: int) -> None:
    pytest.importorskip("openai")
    tasks = tmp_path / "tasks"
    _task(tasks, "fast")
    _task(tasks, "slow", timeout_s=600)
    (tmp_path / "s.yaml").write_text(SCRIPT)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "openforge.cli.main", "eval", "-H", "react", "--env", str(tasks), "-b",
           f"scripted:{tmp_path / 's.yaml'}", "--trials", "2", "-j", "4", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _finished(out / "rollouts.db") < 2 and proc.poll() is None:
            time.sleep(0.3)
        assert _finished(out / "rollouts.db") == 2, "the fast rollouts did not finish"
        proc.send_signal(sig)
        _stdout, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == code, (proc.returncode, err[-3000:])
    data = json.loads((out / "eval.json").read_text())  # before: nothing written
    assert data["interrupted"] is True
    assert data["statuses"] == {"success": 2} and data["valid_trials"] == 2
    assert [t["task_id"] for t in data["per_task"]] == ["fast"]
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["task_id"] for x in lines) == ["fast", "fast"]
    assert "interrupted" in err and "2 finished rollout(s) kept" in " ".join(err.split())


def test_several_backends_with_no_valid_rollout_exit_3(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    tasks = tmp_path / "tasks"
    _task(tasks, "broken", setup="echo 'setup: the fixture is missing' >&2\nexit 4\n")
    (tmp_path / "a.yaml").write_text("tasks:\n  broken:\n    - text: never reached\n")
    (tmp_path / "b.yaml").write_text("tasks:\n  broken:\n    - text: never reached either\n")
    res = CliRunner().invoke(app, ["eval", "-H", "react", "--env", str(tasks), "-b", f"scripted:{tmp_path / 'a.yaml'}",
                                   "-b", f"scripted:{tmp_path / 'b.yaml'}", "--trials", "1",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 3, res.output  # before: 0
    text = " ".join(res.output.split())
    assert "a: no valid rollout; first failed rollout: env_error on task broken" in text
    assert "no back-end had a valid rollout" in text
