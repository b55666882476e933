"""``forge export sft --from ATIF`` on documents of another framework (a Harbor trial directory, written here as
Harbor writes them: ``<trial>/agent/trajectory.json`` + ``result.json``), the held-out guard on ATIF input,
and bad input refused in the user's terms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testdeps import smollm2_tokenizer

from atif_format.harbor_check import harbor_errors
from openforge.atif import from_atif, read_atif, to_atif, write_atif
from openforge.core.errors import StoreError
from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall, RolloutStatus
from openforge.train.sft import export_sft

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a shell command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def _foreign_doc() -> dict:
    """A two-turn terminal-agent trajectory as another framework exports it: text only, no token ids."""
    return {
        "schema_version": "ATIF-v1.6", "session_id": "trial-7f3a",
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "some-provider/model",
                  "tool_definitions": TOOLS},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are a terminal agent."},
            {"step_id": 2, "source": "user", "message": "Create hello.txt containing hello."},
            {"step_id": 3, "source": "agent", "message": "I will write the file.",
             "tool_calls": [{"tool_call_id": "tc1", "function_name": "bash",
                             "arguments": {"command": "echo hello > hello.txt"}}],
             "observation": {"results": [{"source_call_id": "tc1", "content": "(no output)"}]},
             "metrics": {"prompt_tokens": 120, "completion_tokens": 30}},
            {"step_id": 4, "source": "agent", "message": "Done: hello.txt holds hello."},
        ],
        "final_metrics": {"total_prompt_tokens": 260, "total_completion_tokens": 42, "total_steps": 4},
    }


def _harbor_trial(root: Path, name: str, reward: float | None, doc: dict | None = None) -> Path:
    trial = root / name
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "trajectory.json").write_text(json.dumps(doc or _foreign_doc()))
    if reward is not None:
        (trial / "result.json").write_text(json.dumps({"trial_name": name, "verifier_result": {
            "rewards": {"reward": reward}}}))
    return trial / "agent" / "trajectory.json"


def _forge(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforge.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow  # the CLI loads SmolLM2's tokenizer: ~15 s on a loaded 2-core machine
def test_foreign_atif_without_ids_is_retokenized_with_the_chat_template(tmp_path):
    from openforge.proxy.render import Renderer

    job = tmp_path / "job"
    doc_path = _harbor_trial(job, "hello__1", 1.0)
    _harbor_trial(job, "hello__2", 0.0)
    (job / "config.json").write_text(json.dumps({"job_name": "x"}))  # other JSON of the job: passed over
    assert harbor_errors([doc_path]) == {str(doc_path): []}  # the sample is real ATIF
    r = _forge(tmp_path, "export", "sft", "rows.jsonl", "--from", "job", "--format", "tokens")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 ATIF trajectories carry no token ids: their tokens are re-tokenized with smollm2-135m" in r.stderr
    assert "1 tokens rows from 1 successful trajectories (of 2)" in r.stderr  # the reward-0 trial is left out
    (row,) = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    # the tokens are the conversation as SmolLM2's template renders it, loss on the agent's two turns only
    tok = smollm2_tokenizer()
    renderer = Renderer(tok)
    msgs = [{"role": "system", "content": "You are a terminal agent."},
            {"role": "user", "content": "Create hello.txt containing hello."},
            {"role": "assistant", "content": "I will write the file.", "tool_calls": [
                {"id": "tc1", "type": "function", "function": {"name": "bash",
                                                               "arguments": {"command": "echo hello > hello.txt"}}}]},
            {"role": "tool", "tool_call_id": "tc1", "content": "(no output)"},
            {"role": "assistant", "content": "Done: hello.txt holds hello."}]
    assert row["input_ids"] == renderer.encode(renderer.text(msgs, TOOLS, gen=False))[:len(row["input_ids"])]
    trained = tok.decode([t for t, m in zip(row["input_ids"], row["loss_mask"]) if m])
    assert "I will write the file." in trained and "echo hello > hello.txt" in trained
    assert "Done: hello.txt holds hello." in trained and "Create hello.txt" not in trained
    assert "(no output)" not in trained and "terminal agent" not in trained
    # chat rows: the same conversation in OpenAI form
    assert export_sft(read_atif(job), tmp_path / "chat.jsonl", fmt="chat")["rows"] == 1
    (chat,) = [json.loads(line) for line in (tmp_path / "chat.jsonl").read_text().splitlines()]
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "bash",
                                                                "arguments": '{"command": "echo hello > hello.txt"}'}
    assert json.loads(chat["tools"]) == TOOLS and chat["harness"] == "terminus-2"


def test_foreign_atif_reward_comes_from_the_document_or_harbor_else_unknown(tmp_path):
    doc = _foreign_doc()
    t = from_atif({**doc, "extra": {"reward": 1.0, "task_id": "hello"}})
    assert t.reward == 1.0 and t.status == RolloutStatus.SUCCESS and t.task_id == "hello"
    assert from_atif(doc, _harbor_trial(tmp_path, "t1", 0.5)).reward == 0.5
    bare = from_atif(doc, tmp_path / "loose.json")
    assert bare.reward == 0.0 and bare.metadata["atif"]["reward"] == "unknown"
    assert bare.harness == "terminus-2" and bare.metadata["atif"]["agent_version"] == "2.0.0"
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.json").write_text(json.dumps(doc))
    r = _forge(tmp_path, "export", "sft", "rows.jsonl", "--from", "plain")
    assert r.returncode == 1 and "1 of 1 ATIF trajectories record no reward" in r.stderr
    assert "--min-reward 0" in r.stderr
    r = _forge(tmp_path, "export", "sft", "rows.jsonl", "--from", "plain", "--min-reward", "0")
    assert r.returncode == 0, r.stderr


def _own(metadata: dict | None = None) -> Trajectory:
    """A trajectory as the proxy records one (exact ids, two calls of one lineage)."""
    c0 = ModelCall(index=0, request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                   response={"text": "hello", "tool_calls": []}, prompt_ids=[1, 2, 3], output_ids=[4, 5],
                   output_logprobs=[-0.5, -0.25], started_at=1.7e9)
    c1 = ModelCall(index=1, request={"model": "m", "messages": [{"role": "user", "content": "hi"},
                                                                {"role": "assistant", "content": "hello"},
                                                                {"role": "user", "content": "bye"}]},
                   response={"text": "ciao", "tool_calls": []}, prompt_ids=[1, 2, 3, 4, 5, 6], output_ids=[7],
                   output_logprobs=[-1.0])
    return Trajectory(rollout_id="ro_1", task_id="t", harness="react", status=RolloutStatus.SUCCESS, reward=1.0,
                      calls=[c0, c1], metadata=metadata or {}).build()


def test_heldout_atif_is_refused_unless_allowed(tmp_path):
    write_atif([_own({"split": "heldout"})], tmp_path / "own")
    r = _forge(tmp_path, "export", "sft", "x.jsonl", "--from", "own", "--format", "tokens")
    assert r.returncode == 2 and "held-out data" in r.stderr and "1 of 1 trajectories" in r.stderr
    r = _forge(tmp_path, "export", "sft", "x.jsonl", "--from", "own", "--format", "tokens", "--allow-heldout")
    assert r.returncode == 0, r.stderr
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "a.json").write_text(json.dumps({**_foreign_doc(), "extra": {"reward": 1, "split": "heldout"}}))
    r = _forge(tmp_path, "export", "sft", "x.jsonl", "--from", "foreign")
    assert r.returncode == 2 and "held-out data" in r.stderr
    write_atif([_own()], tmp_path / "heldout" / "docs")
    r = _forge(tmp_path, "export", "sft", "x.jsonl", "--from", "heldout/docs")
    assert r.returncode == 2 and "heldout/ folder" in r.stderr


def test_a_rollout_without_calls_is_still_a_valid_document(tmp_path):
    t = Trajectory(rollout_id="ro/odd id", task_id="t", harness="codex", status=RolloutStatus.INFRA_ERROR,
                   error="sandbox could not start")
    (path,) = write_atif([t], tmp_path)
    assert path.name == "ro_odd_id.json" and harbor_errors([path]) == {str(path): []}
    doc = json.loads(path.read_text())
    assert "sandbox could not start" in doc["steps"][0]["message"]
    assert doc["agent"]["version"] != "0.1.0" and doc["agent"]["extra"]["version_source"].startswith("pinned")
    assert read_atif(path) == [t]
    import openforge

    assert (openforge.write_atif, openforge.read_atif) == (write_atif, read_atif)  # the public names


def test_exact_and_text_calls_keep_their_ids_where_they_belong(tmp_path):
    own = _own()
    inexact = own.calls[1].model_copy(update={"exact": False, "index": 2})
    t = Trajectory.model_validate({**own.model_dump(), "calls": [*own.calls, inexact]})
    assert t.capture == "text"
    (path,) = write_atif([t], tmp_path)
    assert harbor_errors([path]) == {str(path): []}
    doc = json.loads(path.read_text())
    text_step = doc["steps"][-1]
    assert "prompt_token_ids" not in text_step["metrics"]  # ids computed after the fact are not the policy's
    assert text_step["extra"]["openforge"]["call"]["prompt_ids"] == inexact.prompt_ids
    assert read_atif(path) == [t]


def test_bad_atif_input_is_refused_naming_the_file(tmp_path):
    (path,) = write_atif([_own()], tmp_path / "docs")
    doc = json.loads(path.read_text())
    agent = [s for s in doc["steps"] if s["source"] == "agent"]
    agent[-1]["metrics"]["completion_token_ids"] = [9]  # the ids no longer match the training segments
    path.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match=r"ro_1\.json: the openforge record does not match the steps' calls"):
        read_atif(path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.json").write_text("{}")
    with pytest.raises(StoreError, match="no ATIF document here"):
        read_atif(tmp_path / "empty")
    with pytest.raises(StoreError, match=r"steps\[1\]\.source must be one of"):
        from_atif({"schema_version": "ATIF-v1.7", "steps": [{"source": "user", "message": "x"}, {"source": "bot"}]})
    r = _forge(tmp_path, "export", "sft", "x.jsonl", "--from", "docs")
    assert r.returncode == 2 and "does not match the steps' calls" in r.stderr and "Traceback" not in r.stderr


def test_export_atif_default_folder_and_refusal_of_atif_input(tmp_path):
    from openforge.store import TrajectoryStore

    run = tmp_path / "run"
    run.mkdir()
    store = TrajectoryStore(run / "trajectories.db")
    store.put_trajectory(_own())
    store.close()
    r = _forge(tmp_path, "export", "atif", "run")
    assert r.returncode == 0, r.stderr
    (path,) = (run / "atif").glob("*.json")
    assert json.loads(path.read_text()) == to_atif(_own())
    r = _forge(tmp_path, "export", "atif", "run/atif")
    assert r.returncode == 2 and "ATIF documents already" in r.stderr
    # a run with its ATIF export inside is still read as the run
    path.write_text(json.dumps({**json.loads(path.read_text()), "steps": "broken"}))
    r = _forge(tmp_path, "export", "sft", "x.jsonl", "--from", "run", "--format", "tokens")
    assert r.returncode == 0 and "wrote 1 tokens rows" in r.stderr, r.stderr


def test_tool_arguments_that_are_no_object_are_kept_as_text(tmp_path):
    tc = {"id": "call_1", "name": "bash", "arguments": "ls -la"}  # the policy wrote no JSON
    req0 = {"model": "m", "messages": [{"role": "user", "content": "list"}], "tools": TOOLS}
    req1 = {**req0, "messages": [*req0["messages"],
                                 {"role": "assistant", "content": "", "tool_calls": [
                                     {"id": "call_1", "type": "function",
                                      "function": {"name": "bash", "arguments": "ls -la"}}]},
                                 {"role": "user", "content": "(the harness interjects)"},
                                 {"role": "tool", "tool_call_id": "call_1", "content": "a b c"}]}
    calls = [ModelCall(index=0, request=req0, response={"text": "", "tool_calls": [tc]}, prompt_ids=[1, 2],
                       output_ids=[3], output_logprobs=[-0.1]),
             ModelCall(index=1, request=req1, response={"text": "a, b and c"}, prompt_ids=[1, 2, 3, 4],
                       output_ids=[5], output_logprobs=[-0.2])]
    t = Trajectory(rollout_id="ro_2", task_id="t", harness="react", reward=1.0, calls=calls).build()
    (path,) = write_atif([t], tmp_path)
    assert harbor_errors([path]) == {str(path): []}
    steps = json.loads(path.read_text())["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "user", "agent"]
    (call,) = steps[1]["tool_calls"]
    assert call["arguments"] == {} and call["extra"] == {"raw_arguments": "ls -la"}
    # the result is linked to the step that made the call, past the user's interjection
    assert steps[1]["observation"]["results"] == [{"content": "a b c", "source_call_id": "call_1"}]
    assert read_atif(path) == [t]
