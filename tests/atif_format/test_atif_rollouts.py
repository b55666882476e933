"""``forge export atif`` on real rollouts — react, CLI harnesses (Claude Code: Messages API, Codex: Responses
API) and a lead agent with a sub-agent (two lineages) — recorded through the real proxy (scripted policy) in real
sandboxes on the claw environment. Every document passes Harbor's own validator; reading it back gives the same
trajectory, and an SFT token export from the ATIF documents equals the direct export byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testdeps import missing

from atif_format.harbor_check import harbor_errors
from openforge.atif import read_atif, to_atif, write_atif
from openforge.core.errors import HarnessError
from openforge.core.trajectory import Trajectory
from openforge.core.types import BreakReason
from openforge.core.types import RolloutStatus as S
from openforge.envs.claw import ClawEnvironment, reference_solution
from openforge.runner.rollout import run_rollout
from openforge.train.sft import export_sft

pytest.importorskip("openai")
ENV = ClawEnvironment()
TASK = "files-create-hello"


def _solve() -> list[dict]:
    return [{"shell": c} for c in reference_solution(TASK)]


def _harness(name: str):
    if name == "react":
        from openforge.harnesses.react import ReactHarness

        return ReactHarness(max_turns=4), [*_solve(), {"tool": {"name": "finish", "arguments": {"answer": "done"}}}]
    if name == "delegating":
        from atif_format.delegating.harness import Delegating

        script = [{"tool": {"name": "delegate", "arguments": {"task": "Create hello.txt as asked."}}}, *_solve(),
                  {"text": "Worker: wrote hello.txt."}, {"text": "All done: the worker wrote hello.txt."}]
        return Delegating(), script
    from openforge.plugins import harness_class

    h = harness_class(name)()
    try:
        h.check_installed()
    except HarnessError as e:
        missing(f"{name} is not installed here: {e}")
    return h, [*_solve(), {"text": "Done: wrote hello.txt."}]


async def _rollout(rig, name: str) -> Trajectory:
    harness, script = _harness(name)
    proxy, launcher, store = await rig({"turns": script})
    traj = await run_rollout(harness=harness, environment=ENV, task=ENV.task(TASK), launcher=launcher, proxy=proxy,
                             store=store, budget_s=180)
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.error, traj.metadata)
    return traj


def _agent_steps(doc: dict) -> list[dict]:
    return [s for s in doc["steps"] if s["source"] == "agent" and not s.get("is_copied_context")]


def _check_round_trip(traj: Trajectory, tmp_path: Path) -> dict:
    """Validated by Harbor; read back equal; SFT exports (tokens, chat) equal. Returns the document."""
    paths = write_atif([traj], tmp_path / "atif")
    assert harbor_errors(paths) == {str(paths[0]): []}
    doc = json.loads(paths[0].read_text())
    assert doc["schema_version"] == "ATIF-v1.7" and doc["agent"]["name"] == traj.harness
    assert read_atif(tmp_path / "atif") == [traj]
    for fmt in ("tokens", "chat"):
        direct = export_sft([traj], tmp_path / f"direct-{fmt}.jsonl", fmt=fmt)
        via = export_sft(read_atif(tmp_path / "atif"), tmp_path / f"via-{fmt}.jsonl", fmt=fmt)
        assert direct["rows"] == via["rows"]
        assert (tmp_path / f"direct-{fmt}.jsonl").read_bytes() == (tmp_path / f"via-{fmt}.jsonl").read_bytes()
    assert export_sft([traj], tmp_path / "n.jsonl", fmt="tokens")["rows"] >= 1
    # read as another framework's document (openforge's extras dropped): the ids in the steps' metrics alone
    # give the same token rows
    foreign = tmp_path / "foreign" / "doc.json"
    foreign.parent.mkdir()
    foreign.write_text(json.dumps(_without_openforge(doc)))
    assert harbor_errors([foreign]) == {str(foreign): []}
    (read,) = read_atif(foreign)
    assert read.metadata["atif"]["token_ids"] == "recorded" and all(c.exact for c in read.calls)
    export_sft([read], tmp_path / "foreign.jsonl", fmt="tokens")
    assert (tmp_path / "foreign.jsonl").read_bytes() == (tmp_path / "direct-tokens.jsonl").read_bytes()
    return doc


def _without_openforge(value):
    if isinstance(value, dict):
        return {k: _without_openforge(v) for k, v in value.items() if k != "openforge"}
    if isinstance(value, list):
        return [_without_openforge(v) for v in value]
    return value


def _check_calls_as_steps(traj: Trajectory, doc: dict, shell_tool: str) -> None:
    """One agent step per call with its exact ids; the shell tool call's output is its observation."""
    steps = _agent_steps(doc) + [s for sub in doc.get("subagent_trajectories") or [] for s in _agent_steps(sub)]
    assert sorted(s["extra"]["openforge"]["call"]["index"] for s in steps) == [c.index for c in traj.calls]
    by_index = {s["extra"]["openforge"]["call"]["index"]: s for s in steps}
    for c in traj.calls:
        m = by_index[c.index]["metrics"]
        assert m["prompt_token_ids"] == c.prompt_ids and m["completion_token_ids"] == c.output_ids
        assert m["logprobs"] == c.output_logprobs and m["completion_tokens"] == len(c.output_ids)
    shell = [(s, tc) for s in steps for tc in s.get("tool_calls") or [] if tc["function_name"] == shell_tool]
    assert shell, [s.get("tool_calls") for s in steps]
    step, tc = shell[0]
    assert reference_solution(TASK)[0] in tc["arguments"].values()
    linked = [r for r in step["observation"]["results"] if r.get("source_call_id") == tc["tool_call_id"]]
    assert linked and isinstance(linked[0]["content"], str), step.get("observation")


@pytest.mark.parametrize(("name", "shell_tool"), [
    ("react", "shell"),
    pytest.param("claude-code", "Bash", marks=pytest.mark.slow),  # ~20 s each on a loaded 2-core machine
    pytest.param("codex", "exec_command", marks=pytest.mark.slow)])
async def test_harness_rollout_exports_valid_atif_that_round_trips(rig, tmp_path, name, shell_tool):
    traj = await _rollout(rig, name)
    doc = _check_round_trip(traj, tmp_path)
    _check_calls_as_steps(traj, doc, shell_tool)
    assert doc["agent"]["version"] and doc["extra"]["reward"] == 1.0 and doc["extra"]["status"] == "success"
    assert doc["steps"][0]["source"] in ("system", "user") and "subagent_trajectories" not in doc
    user = [s["message"] for s in doc["steps"] if s["source"] == "user"]
    assert any("hello" in m for m in user), user  # the task's instruction is the user's turn


async def test_sub_agent_is_an_embedded_subagent_trajectory(rig, tmp_path):
    traj = await _rollout(rig, "delegating")
    reasons = [s.break_reason for s in traj.segments]
    assert reasons == [BreakReason.FIRST, BreakReason.NEW_LINEAGE], reasons  # two lineages, token-level too
    doc = _check_round_trip(traj, tmp_path)
    _check_calls_as_steps(traj, doc, "bash")
    (sub,) = doc["subagent_trajectories"]
    assert sub["trajectory_id"] != doc["trajectory_id"] and sub["steps"][0]["step_id"] == 1
    assert [s["message"] for s in sub["steps"] if s["source"] == "user"] == ["Create hello.txt as asked."]
    assert [tc["function_name"] for s in _agent_steps(sub) for tc in s.get("tool_calls") or []] == ["bash"]
    main_calls = [tc["function_name"] for s in _agent_steps(doc) for tc in s.get("tool_calls") or []]
    assert main_calls == ["delegate"]
    # the lead's delegate call carries the reference to the worker's trajectory, next to the worker's answer
    (step,) = [s for s in _agent_steps(doc) if s.get("tool_calls")]
    (result,) = step["observation"]["results"]
    assert result["source_call_id"] == step["tool_calls"][0]["tool_call_id"]
    assert result["content"] == "Worker: wrote hello.txt."
    assert result["subagent_trajectory_ref"] == [{"trajectory_id": sub["trajectory_id"],
                                                  "session_id": traj.rollout_id}]


def test_cli_exports_atif_and_sft_from_it_equals_the_direct_export(tmp_path):
    def forge(*args: str) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "openforge.cli.main", *args], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300, env={**os.environ, "COLUMNS": "200"})
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    forge("rollout", "--env", "claw", "--task", "notes-create", "--backend", "scripted:-", "--reference",
          "--out", "one")
    r = forge("export", "atif", "one/trajectory.json", "-o", "atif")
    assert "wrote 1 ATIF-v1.7 trajectories to atif" in r.stdout
    (path,) = (tmp_path / "atif").glob("*.json")
    assert harbor_errors([path]) == {str(path): []}
    forge("export", "sft", "direct.jsonl", "--from", "one/trajectory.json", "--format", "tokens")
    r = forge("export", "sft", "via.jsonl", "--from", "atif", "--format", "tokens")
    assert "re-tokenized" not in r.stderr  # the ids came from the documents
    direct, via = (tmp_path / "direct.jsonl").read_bytes(), (tmp_path / "via.jsonl").read_bytes()
    assert direct and direct == via
    assert to_atif(read_atif(path)[0]) == json.loads(path.read_text())  # and again: a fixed point
