"""Harness notes and drift: notes of a harness version from a trajectory; a rollout whose harness
sends another system prompt or other tools than its notes is flagged (``harness_drift``), per step
and for the run; a date or a working directory in the prompt is no drift."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import ModelCall
from openforge.harnesses import notes as N
from openforge.plugins import make_harness

SPEC = Path(__file__).resolve().parent / "data" / "minichat" / "minichat.yaml"
PROMPT = ("x-vendor-billing-header: cc_version=2.1.197.{sid}; cch={hdr};\n"
          "You are minichat. Today is {date}. Your working directory is {cwd}. Session {sid}.")
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def traj(system: str, tools=TOOLS, *, api: str = "chat", harness: str = "minichat") -> Trajectory:
    req = {"model": "p", "stream": True, "max_tokens": 9, "tools": tools,
           "messages": [{"role": "system", "content": system}, {"role": "user", "content": "do it"}]}
    reply = copy.deepcopy({**req, "messages": [*req["messages"], {"role": "assistant", "content": "ok"}]})
    return Trajectory(rollout_id="r", task_id="t", harness=harness,
                      calls=[ModelCall(index=0, api=api, request=req, response={"text": "x"}),
                             ModelCall(index=1, api=api, request=reply, response={"text": "done"})])


def prompt(date="2026-12-05", cwd="/tmp/forge-1a2b3c4d5e/work", sid="c5e", hdr="abc") -> str:
    return PROMPT.format(date=date, cwd=cwd, sid=sid, hdr=hdr)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("OPENFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "harness-notes"


def test_notes_record_what_the_harness_sends():
    n = N.observe(traj(prompt()), version="1.0.0")
    assert n.harness == "minichat" and n.wire == "chat" and n.tools == ["bash"] and n.streaming
    assert n.injected == ["max_tokens"] and n.calls == 2 and n.retries == 0
    assert not n.compaction and not n.rewrites_history and n.system_chars == len(prompt())
    t = traj(prompt())
    t.calls[1].request["messages"][0]["content"] = "other"
    assert N.observe(t, version="1").rewrites_history
    t.calls.append(t.calls[1].model_copy())
    assert N.observe(t, version="1").retries == 1


def test_per_rollout_detail_is_no_drift_and_a_changed_prompt_or_tool_is():
    ref = N.observe(traj(prompt()), version="1.0.0")
    assert N.drift(ref, traj(prompt(date="2027-01-31", cwd="/srv/other/place", sid="e5f", hdr="xyz")), "1.0.0") is None
    d = N.drift(ref, traj(prompt().replace("You are minichat.", "You are minichat, be terse.")), "1.0.0")
    assert set(d["changed"]) == {"system_prompt"} and d["changed"]["system_prompt"]["noted"] == ref.system_sha
    more = [*TOOLS, {"type": "function", "function": {"name": "web_fetch", "parameters": {}}}]
    assert N.drift(ref, traj(prompt(), more), "1.0.0")["changed"]["tools"] == {"added": ["web_fetch"], "removed": []}


def test_system_prompt_and_tools_of_each_wire():
    calls = [ModelCall(index=0, api="messages", request={"system": [{"type": "text", "text": "S"}],
                                                         "tools": [{"name": "Bash", "input_schema": {}}]}),
             ModelCall(index=0, api="responses", request={"instructions": "S", "input": [
                 {"role": "developer", "content": [{"type": "input_text", "text": "D"}]}, {"role": "user", "content": "u"}],
                 "tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}]}),
             ModelCall(index=0, api="unknown", request={"systemInstruction": {"parts": [{"text": "G"}]},
                                                        "tools": [{"functionDeclarations": [{"name": "run"}]}]})]
    assert [N.system_text(c) for c in calls] == ["S", "S\nD", "G"]
    assert [N.tool_names(c) for c in calls] == [["Bash"], ["exec_command", "web_search"], ["run"]]


def test_check_drift_uses_the_notes_of_the_version_else_the_newest_other(cache):
    h = make_harness(str(SPEC))  # version 1.0.0
    assert N.check_drift(h, traj("anything")) is None  # no notes: not compared
    old = N.observe(traj(prompt()), version="0.9.0")
    N.save_notes(old)
    d = N.check_drift(h, traj("a rewritten prompt"))
    assert d is not None and d["noted_version"] == "0.9.0" and d["version"] == "1.0.0"  # an upgrade changed it
    N.save_notes(N.observe(traj("a rewritten prompt"), version="1.0.0"))
    assert N.check_drift(h, traj("a rewritten prompt")) is None  # this version's own notes win
    assert N.check_drift(h, traj("a rewritten prompt", api="responses")) is None  # no notes for that wire
    (cache / next(p.name for p in cache.iterdir() if "1.0.0" in p.name)).write_text("{broken")
    assert N.check_drift(h, traj("a rewritten prompt"))["noted_version"] == "0.9.0"  # a broken file is no reference


def test_the_count_reaches_the_step_metrics():
    from openforge.runner.rollout import GroupResults
    from openforge.runner.run_report import step_metrics

    drifted = traj("x").model_copy(update={"harness_drift": {"changed": {"tools": {}}}})
    line = step_metrics(GroupResults([TrajectoryGroup(task_id="t", trajectories=[traj("x"), drifted, drifted])]),
                        step=1, elapsed={})
    assert line["harness_drift"] == 2
    assert "harness_drift" not in traj("x").to_json() and Trajectory.from_json(drifted.to_json()).harness_drift


@pytest.mark.slow
def test_a_changed_system_prompt_between_two_runs_is_flagged(tmp_path, cache, monkeypatch):
    """Run 1: `forge harness check SPEC` notes minichat 1.0.0. Run 2: the same harness and version
    whose system prompt changed → every rollout carries harness_drift; unchanged → none."""
    import json

    from typer.testing import CliRunner

    from openforge.cli.main import app

    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path / "harnesses"))
    res = CliRunner().invoke(app, ["harness", "check", str(SPEC)])
    assert res.exit_code == 0, res.output
    assert "splicing" in res.output and "FAIL" not in res.output and len(list(cache.glob("minichat--chat--*"))) == 1
    changed = tmp_path / "minichat.yaml"
    changed.write_text(SPEC.read_text().replace("./minichat.py", str(SPEC.with_name("minichat.py")))
                       .replace("a careful shell agent", "a reckless shell agent"))

    def rollout(spec: Path, out: Path) -> dict:
        r = CliRunner().invoke(app, ["rollout", "-H", str(spec), "-e", "claw", "-t", "files-create-hello",
                                     "--reference", "-o", str(out)])
        assert r.exit_code == 0, r.output
        return json.loads((out / "trajectory.json").read_text())

    drifted = rollout(changed, tmp_path / "run2")
    assert set(drifted["harness_drift"]["changed"]) == {"system_prompt"}, drifted.get("harness_drift")
    assert drifted["harness_drift"]["version"] == "1.0.0" and drifted["status"] == "success"
    assert "harness_drift" not in rollout(SPEC, tmp_path / "run3")  # as noted: no drift
