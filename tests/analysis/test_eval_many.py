"""``forge eval`` with several ``--backend`` values: each on the same tasks (the real react harness, the
real proxy, real verifiers), one directory per back-end, and one side-by-side table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.analysis.eval_many import backend_label, normalize_backend
from openforge.cli.main import app

from .test_eval_cli import HELLO_VERIFY, _task

GOOD = "turns:\n  - shell: \"echo hi > hello.txt\"\n  - text: Done.\n"
BAD = "turns:\n  - text: I will not do it.\n"


def test_labels_and_run_selectors(tmp_path: Path) -> None:
    run = tmp_path / "claw-grpo-x"
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    assert normalize_backend(f"{run}@last") == f"transformers:{run}@last"
    assert normalize_backend(str(run / "checkpoints" / "step-2")) == f"transformers:{run / 'checkpoints' / 'step-2'}"
    assert normalize_backend("scripted:x.yaml") == "scripted:x.yaml" and normalize_backend("reference") == "reference"
    assert backend_label(f"transformers:{run}@best") == "claw-grpo-x@best"
    assert backend_label(f"transformers:{run}/checkpoints/step-2") == "claw-grpo-x@2"
    assert backend_label("transformers:smollm2-135m") == "smollm2-135m"
    assert backend_label("vllm:http://127.0.0.1:8000") == "vllm-http-127.0.0.1-8000"


def test_eval_several_backends_one_table(tmp_path: Path) -> None:
    pytest.importorskip("openai", reason="the react harness needs the openai package")
    tasks = tmp_path / "tasks"
    _task(tasks, "hello", 'split = "eval"\ncategory = "files"\ntimeout_s = 60\n', "Create hello.txt containing hi.",
          HELLO_VERIFY)
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD)
    out = tmp_path / "out"
    args = ["eval", "-H", "react", "-e", str(tasks), "-b", f"scripted:{tmp_path / 'bad.yaml'}",
            "-b", f"scripted:{tmp_path / 'good.yaml'}", "-k", "2", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    assert {p.name for p in out.iterdir()} == {"1-bad", "2-good"}
    bad, good = (json.loads((out / d / "eval.json").read_text()) for d in ("1-bad", "2-good"))
    assert (bad["pass_at_1"], good["pass_at_1"]) == (0.0, 1.0) and bad["trials"] == good["trials"] == 2
    table = res.output[res.output.index("pass@1"):]
    row = next(line for line in table.splitlines() if "pass@1" in line)
    assert row.index("0.0 %") < row.index("100.0 %")  # one column per back-end, in the order given
    assert "bad" in res.output and "good" in res.output
    res = CliRunner().invoke(app, [*args[:-2], "-o", str(tmp_path / "j"), "--json"])
    data = json.loads(res.output[res.output.index("["):])
    assert [d["backend"] for d in data] == ["bad", "good"] and data[1]["summary"]["pass_at_1"] == 1.0
