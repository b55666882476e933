"""SFT export (chat + token formats, JSONL + Parquet, loadable with HF datasets) and SFT samples."""

from __future__ import annotations

import json

import pytest

from openforge.core.errors import ConfigError
from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall, RolloutStatus
from openforge.runner.session import reference_script
from openforge.train.sft import chat_record, export_sft, load_token_samples, sft_samples

TOOLS = [{"type": "function", "function": {"name": "shell", "description": "run",
                                            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


def _traj(rid: str, reward: float, status=RolloutStatus.SUCCESS, exact: bool = True) -> Trajectory:
    m0 = [{"role": "system", "content": "sys"}, {"role": "user", "content": "make hello.txt"}]
    tc = {"id": "c1", "name": "shell", "arguments": '{"command": "echo hi > hello.txt"}'}
    m1 = [*m0, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": tc["arguments"]}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "exit code 0"}]
    calls = [
        ModelCall(index=0, request={"messages": m0, "tools": TOOLS}, response={"text": "", "tool_calls": [tc]},
                  prompt_ids=[1, 2, 3], output_ids=[4, 5], output_logprobs=[0.0, 0.0], exact=exact),
        ModelCall(index=1, request={"messages": m1, "tools": TOOLS}, response={"text": "Done.", "tool_calls": []},
                  prompt_ids=[1, 2, 3, 4, 5, 6, 7], output_ids=[8], output_logprobs=[0.0], exact=exact),
    ]
    return Trajectory(rollout_id=rid, task_id="files-create-hello", reward=reward, status=status, calls=calls,
                      harness="react").build()


def test_chat_record_is_the_final_conversation():
    rec = chat_record(_traj("a", 1.0))
    roles = [m["role"] for m in rec["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert rec["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"command": "echo hi > hello.txt"}'
    assert rec["messages"][-1]["content"] == "Done."
    assert json.loads(rec["tools"])[0]["function"]["name"] == "shell"


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_export_loads_with_hf_datasets(tmp_path, ext):
    datasets = pytest.importorskip("datasets")
    trajs = [_traj("a", 1.0), _traj("b", 0.0, RolloutStatus.POLICY_FAILURE), _traj("c", 1.0),
             _traj("x", 1.0, RolloutStatus.INFRA_ERROR)]
    res = export_sft(trajs, tmp_path / f"chat.{ext}")
    assert (res["trajectories"], res["rows"]) == (2, 2)  # failures and infra errors are not SFT data
    kind = "json" if ext == "jsonl" else "parquet"
    ds = datasets.load_dataset(kind, data_files=str(tmp_path / f"chat.{ext}"), split="train")
    assert len(ds) == 2 and ds[0]["messages"][1]["content"] == "make hello.txt"
    tok = export_sft(trajs, tmp_path / f"tokens.{ext}", fmt="tokens")
    assert tok["rows"] == 2
    ds = datasets.load_dataset(kind, data_files=str(tmp_path / f"tokens.{ext}"), split="train")
    assert ds[0]["input_ids"] == [1, 2, 3, 4, 5, 6, 7, 8] and ds[0]["loss_mask"] == [0, 0, 0, 1, 1, 0, 0, 1]
    samples = load_token_samples(tmp_path / f"tokens.{ext}")
    assert samples[0].loss_mask == [0, 0, 0, 1, 1, 0, 0, 1] and samples[0].num_trained_tokens == 3


def test_inexact_calls_export_as_chat_only(tmp_path):
    t = _traj("a", 1.0, exact=False)
    assert export_sft([t], tmp_path / "c.jsonl")["rows"] == 1
    assert export_sft([t], tmp_path / "t.jsonl", fmt="tokens")["rows"] == 0  # never train on re-tokenized text
    assert sft_samples([t]) == []


def test_bad_export_arguments(tmp_path):
    with pytest.raises(ConfigError, match=r"jsonl or \.parquet"):
        export_sft([_traj("a", 1.0)], tmp_path / "x.csv")
    with pytest.raises(ConfigError, match="chat"):
        export_sft([], tmp_path / "x.jsonl", fmt="xml")
    (tmp_path / "chat.jsonl").write_text(json.dumps({"messages": []}) + "\n")
    with pytest.raises(ConfigError, match="format tokens"):
        load_token_samples(tmp_path / "chat.jsonl")


def test_reference_script():
    from openforge.core.task import Task

    class Env:
        name = "demo"

        def reference_solution(self, t):
            return t.metadata.get("solution")

    tasks = [Task(id="a", instruction="x", metadata={"solution": ["ls", "echo"]}), Task(id="b", instruction="y")]
    s = reference_script(Env(), tasks)
    assert s["tasks"] == {"a": [{"shell": "ls"}, {"shell": "echo"}, {"text": "Done."}]}
    with pytest.raises(ConfigError, match="no task"):
        reference_script(Env(), tasks[1:])


@pytest.mark.slow
def test_forge_export_sft_runs_the_reference_teacher(tmp_path):
    """`forge export sft`: reference solutions replayed through the real react harness and proxy."""
    pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    from typer.testing import CliRunner

    from openforge.cli.main import app

    out = tmp_path / "teacher.jsonl"
    r = CliRunner().invoke(app, ["export", "sft", str(out), "--subset", "easy", "--max-tasks", "2",
                                 "--run-dir", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert len(ds) == 2
    msgs = ds[0]["messages"]
    assert msgs[0]["role"] == "system" and any(m["tool_calls"] for m in msgs if m["role"] == "assistant")


@pytest.mark.slow
def test_claw_sft_recipe(tmp_path):
    pytest.importorskip("torch")
    from openforge.runner.forge import run

    s = run(recipe="claw-sft", preset="test", overrides=[f"run_dir={tmp_path}"], progress=False)
    assert s["sft"]["steps"] == 1 and s["sft"]["trajectories"] == 2 and s["steps"] == []
    assert (tmp_path / "sft" / "teacher_tokens.jsonl").is_file()
