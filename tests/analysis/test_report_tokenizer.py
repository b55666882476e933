"""``forge report`` decodes with the run's own tokenizer by default (issue 26): read from the run's
config.yaml (a training run's model.name; an eval's --tokenizer / transformers back-end / its back-end's
default), with a progress message; ``--tokenizer`` still overrides; no tokenizer known → it says so."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.analysis.report_tokenizer import TokenizerChoice, run_tokenizer
from openforge.cli.main import app

runner = CliRunner()


def test_the_choice_is_read_from_the_run_config() -> None:
    assert run_tokenizer({"model": {"name": "runs/x/checkpoints/step-2"}}) == \
        TokenizerChoice("runs/x/checkpoints/step-2", "the run's model.name")
    assert run_tokenizer({"kind": "eval", "backend": "scripted:s.yaml", "tokenizer": "/m/tok"}).name == "/m/tok"
    assert run_tokenizer({"kind": "eval", "backend": "transformers:runs/r@last"}).name == "runs/r@last"
    assert run_tokenizer({"kind": "eval", "backend": "vllm:http://h:8000"}).name == "smollm2-135m"
    assert run_tokenizer({"kind": "eval", "backend": "reference"}).name == "smollm2-135m"
    assert run_tokenizer({"kind": "eval", "backend": "mine:x"}).name is None
    assert run_tokenizer(None).name is None and "no config.yaml" in run_tokenizer({}).source


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("openai")
    root = tmp_path_factory.mktemp("ev")
    d = root / "tasks" / "hello"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('id = "hello"\nsplit = "eval"\ntimeout_s = 60\nexit_code_reward = true\n')
    (d / "instruction.md").write_text("Create hello.txt containing hi.")
    (d / "verify.sh").write_text('#!/bin/sh\ntest -f "$1/hello.txt"\n')
    os.chmod(d / "verify.sh", 0o755)
    (root / "s.yaml").write_text('tasks:\n  hello:\n    - shell: "echo hi > hello.txt"\n    - text: "Done."\n')
    res = runner.invoke(app, ["eval", "-H", "react", "--env", str(root / "tasks"), "-b", f"scripted:{root / 's.yaml'}",
                              "--trials", "1", "--out", str(root / "out"), "--json"])
    assert res.exit_code == 0, res.output
    return root / "out"


def test_report_decodes_with_the_runs_own_tokenizer_by_default(eval_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(eval_dir), "--out", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    text = " ".join(res.output.split())
    assert "loading tokenizer smollm2-135m (the default tokenizer of the eval's scripted back-end)" in text
    assert re.search(r"tokenizer smollm2-135m loaded in \d", text)
    html = out.read_text()
    assert "tokens decoded with the run" in html  # before: raw token ids unless --tokenizer
    trained = re.findall(r'<span class="tok trained"[^>]*>(.*?)</span>', html, re.S)
    assert any("echo hi &gt; hello.txt" in t for t in trained), trained[:3]


def test_no_tokenizer_known_or_loadable_says_so_and_still_writes(eval_dir: Path, tmp_path: Path) -> None:
    cfg = (eval_dir / "config.yaml").read_text()
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text((eval_dir / "trajectories.jsonl").read_text())
    (run / "config.yaml").write_text(cfg.replace("backend: scripted:", "backend: mine:"))
    res = runner.invoke(app, ["report", str(run)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert "no tokenizer for this run (the eval's back-end mine:" in " ".join(res.output.split())
    assert "tokens decoded with the run" not in (run / "report.html").read_text()
    (run / "config.yaml").write_text(json.dumps({"model": {"name": str(tmp_path / "gone-model")}}))
    res = runner.invoke(app, ["report", str(run)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert "cannot load the run's tokenizer" in " ".join(res.output.split())


def test_an_explicit_tokenizer_overrides_and_must_load(eval_dir: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", str(eval_dir), "--out", str(tmp_path / "r.html"), "--tokenizer",
                              str(tmp_path / "nope")])
    assert res.exit_code != 0 and "cannot load tokenizer" in str(res.exception)
    res = runner.invoke(app, ["report", str(eval_dir), "--out", str(tmp_path / "r.html"), "--tokenizer", "smollm2"])
    assert res.exit_code == 0 and "loading tokenizer smollm2 (--tokenizer)" in " ".join(res.output.split())
