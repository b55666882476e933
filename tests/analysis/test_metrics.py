"""Behaviour metrics pinned on hand-made trajectories (definitions: docs/metrics.md)."""

from __future__ import annotations

import pytest

from openforge.analysis.metrics import rollout_behaviour, summarize_behaviour
from openforge.core.task import Task

from .factory import traj

OK = "Process exited with code 0"
FAIL = "Process exited with code 1\nError: no such thing"


# ---------------------------------------------------------------- generic-shell share


def test_generic_shell_share_is_pooled_over_steps() -> None:
    a = traj([("bash", {"command": "ls"}, OK), ("list_events", {}, "[]"), ("create_event", {"t": 1}, "ok")])
    b = traj([("exec_command", {"cmd": "ls"}, OK)], rollout_id="r2", api="responses")
    s = summarize_behaviour([a, b])
    # 2 shell steps of 4 pooled (a per-rollout mean would give (1/3 + 1) / 2 = 0.667)
    assert s.generic_shell_share == pytest.approx(0.5)
    assert rollout_behaviour(a).shell_steps == 1 and rollout_behaviour(a).steps == 3


def test_generic_shell_names_across_harnesses() -> None:
    names = ["Bash", "exec_command", "exec", "shell", "local_shell", "mcp__sandbox__bash"]
    t = traj([(n, {"command": "true"}, OK) for n in names] + [("Read", {"file_path": "x"}, "x")])
    assert rollout_behaviour(t).shell_steps == len(names)


# ---------------------------------------------------------------- self-verification


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_read_back_of_written_file_verifies(api: str) -> None:
    t = traj([("write", {"path": "/w/out.txt", "content": "hi"}, "ok"), ("read", {"path": "/w/out.txt"}, "hi")], api=api)
    b = rollout_behaviour(t)
    assert (b.write_actions, b.verification_actions, b.verified) == (1, 1, True)


def test_reading_another_file_does_not_verify() -> None:
    t = traj([("write", {"path": "out.txt", "content": "hi"}, "ok"), ("read", {"path": "other.txt"}, "x")])
    assert rollout_behaviour(t).verified is False


def test_read_before_write_does_not_verify() -> None:
    t = traj([("read", {"path": "out.txt"}, ""), ("write", {"path": "out.txt", "content": "hi"}, "ok")])
    assert rollout_behaviour(t).verified is False


def test_no_write_means_undefined_and_excluded() -> None:
    t = traj([("read", {"path": "a.txt"}, "x")])
    assert rollout_behaviour(t).verified is None
    w = traj([("write", {"path": "b.txt"}, "ok")], rollout_id="r2")
    assert summarize_behaviour([t, w]).self_verification_rate == 0.0  # only w counts


def test_shell_write_then_cat_in_same_command_verifies() -> None:
    t = traj([("bash", {"command": "echo hi > out.txt && cat out.txt"}, "hi")])
    b = rollout_behaviour(t)
    assert (b.write_actions, b.verified) == (1, True)


def test_shell_redirect_to_dev_null_is_not_a_write() -> None:
    t = traj([("bash", {"command": "ls > /dev/null 2>&1"}, OK), ("bash", {"command": "ls"}, OK)])
    assert rollout_behaviour(t).write_actions == 0


def test_rerunning_a_check_after_a_change_verifies() -> None:
    t = traj([
        ("bash", {"command": "pytest -q"}, FAIL),
        ("apply_patch", {"input": "*** Update File: src/m.py\n-a\n+b"}, "Done"),
        ("bash", {"command": "pytest -q"}, OK),
    ])
    assert rollout_behaviour(t).verification_actions == 1


def test_rerunning_without_a_change_in_between_is_not_verification() -> None:
    t = traj([
        ("apply_patch", {"input": "*** Update File: src/m.py\n"}, "Done"),
        ("bash", {"command": "pytest -q"}, FAIL),
        ("bash", {"command": "pytest -q"}, FAIL),
    ])
    # the first pytest (after the patch) is not a re-run; the second repeats it with no write between
    assert rollout_behaviour(t).verification_actions == 0


def test_service_write_then_read_of_same_resource_verifies() -> None:
    t = traj([("calendar_create_event", {"title": "x"}, "{id: 1}"), ("calendar_list_events", {}, "[x]")])
    assert rollout_behaviour(t).verified is True
    t2 = traj([("calendar_create_event", {"title": "x"}, "{id: 1}"), ("list_contacts", {}, "[]")])
    assert rollout_behaviour(t2).verified is False


# ---------------------------------------------------------------- required-tool coverage


def test_required_tool_coverage_counts_distinct_required_tools() -> None:
    task = Task(id="t1", instruction="x", required_tools=("list_events", "create_event", "send_email"))
    t = traj([("list_events", {}, "[]"), ("list_events", {}, "[]"), ("create_event", {}, "ok")])
    b = rollout_behaviour(t, task)
    assert b.covered_tools == ["list_events", "create_event"]
    assert b.required_tool_coverage == pytest.approx(2 / 3)


def test_required_tool_used_through_the_shell_counts() -> None:
    task = Task(id="t1", instruction="x", required_tools=("gcal", "mailer"))
    t = traj([("bash", {"command": "gcal list --today"}, OK), ("bash", {"command": "cat mailer.log"}, OK)])
    assert rollout_behaviour(t, task).covered_tools == ["gcal"]  # mailer.log is a file, not the CLI


def test_required_tools_from_metadata_and_undefined_without() -> None:
    t = traj([("x", {}, "")], metadata={"required_tools": ["x", "y"]})
    assert rollout_behaviour(t).required_tool_coverage == 0.5
    assert rollout_behaviour(traj([("x", {}, "")])).required_tool_coverage is None


# ---------------------------------------------------------------- subgoals / plan completion


def test_subgoal_completion_and_plan() -> None:
    task = Task(id="t1", instruction="x", subgoals=("found", "booked", "emailed"))
    t = traj([], rewards={"subgoal:found": 1.0, "booked": 0.5, "other": 1.0})
    b = rollout_behaviour(t, task)
    assert b.subgoal_scores == {"found": 1.0, "booked": 0.5}
    assert b.subgoal_completion == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3: missing scores count 0
    assert b.plan_completed is False
    done = traj([], rewards={}, metrics={"subgoals": {"found": True, "booked": 1, "emailed": 2.0}})
    b2 = rollout_behaviour(done, task)
    assert b2.subgoal_completion == 1.0 and b2.plan_completed is True
    assert rollout_behaviour(traj([]), task).subgoal_completion is None  # nothing scored: unknown


# ---------------------------------------------------------------- error recovery


def test_recovery_needs_a_different_successful_step() -> None:
    t = traj([
        ("bash", {"command": "python app.py"}, FAIL),
        ("bash", {"command": "python app.py"}, FAIL),  # same call again: not a change of approach
        ("bash", {"command": "python3 app.py"}, OK),  # different and works: recovers both failures
    ])
    b = rollout_behaviour(t)
    assert (b.failed_steps, b.recovered_failures, b.repeated_after_failure) == (2, 2, 1)


def test_no_recovery_when_only_the_same_call_succeeds_later() -> None:
    t = traj([("bash", {"command": "curl localhost:1"}, FAIL), ("bash", {"command": "curl localhost:1"}, OK)])
    assert rollout_behaviour(t).recovered_failures == 0


def test_no_recovery_when_every_later_step_fails() -> None:
    t = traj([("bash", {"command": "a"}, FAIL), ("bash", {"command": "b"}, FAIL)])
    b = rollout_behaviour(t)
    assert (b.failed_steps, b.recovered_failures) == (2, 0)


def test_error_recovery_aggregates() -> None:
    good = traj([("bash", {"command": "a"}, FAIL), ("bash", {"command": "b"}, OK)], rollout_id="g")
    bad = traj([("bash", {"command": "a"}, FAIL)], status="policy_failure", rollout_id="b")
    clean = traj([("bash", {"command": "a"}, OK)], rollout_id="c")
    s = summarize_behaviour([good, bad, clean])
    assert s.error_recovery_rate == 0.5  # 1 of 2 failed steps recovered
    assert s.success_after_failure_rate == 0.5  # of the 2 rollouts with a failure, 1 succeeded
    assert s.repeat_after_failure_rate == 0.0


# ---------------------------------------------------------------- efficiency and filtering


def test_steps_tokens_wall_time() -> None:
    t = traj([("bash", {"command": "a"}, OK), ("bash", {"command": "b"}, OK)])
    b = rollout_behaviour(t)
    assert (b.steps, b.calls) == (2, 3)
    assert b.prompt_tokens == 10 + 15 + 20 and b.completion_tokens == 9
    assert b.wall_time_s == pytest.approx(2.5)  # first start 100.0, last end 102.5
    assert rollout_behaviour(traj([], metrics={"wall_time_s": 7.0})).wall_time_s == 7.0


def test_infra_failures_are_left_out() -> None:
    ok = traj([("bash", {"command": "a"}, OK)])
    crashed = traj([("read", {"path": "x"}, "x")] * 3, status="infra_error", rollout_id="r2")
    s = summarize_behaviour([ok, crashed])
    assert s.rollouts == 1 and s.generic_shell_share == 1.0 and s.steps_per_task == 1.0


def test_empty_summary_is_undefined_not_zero() -> None:
    s = summarize_behaviour([])
    assert s.rollouts == 0 and s.generic_shell_share is None and s.error_recovery_rate is None


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_same_facts_from_wire_and_canonical_records(api: str) -> None:
    steps = [
        ("bash", {"command": "python app.py"}, FAIL),
        ("write", {"path": "app.py", "content": "print(1)"}, "ok"),
        ("bash", {"command": "python app.py"}, OK),
    ]
    wire = rollout_behaviour(traj(steps, api=api)).model_dump()
    canon = rollout_behaviour(traj(steps, api=api, canonical=True)).model_dump()
    for key in ("prompt_tokens", "completion_tokens"):
        wire.pop(key), canon.pop(key)
    assert wire == canon
    assert (canon["failed_steps"], canon["recovered_failures"], canon["verified"]) == (1, 1, True)


def test_planning_tools_are_neither_writes_nor_verification() -> None:
    t = traj([("TodoWrite", {"todos": [{"content": "x"}]}, "ok"), ("update_plan", {"plan": []}, "ok"),
              ("Read", {"file_path": "a.py"}, "x")], api="messages")
    b = rollout_behaviour(t)
    assert (b.write_actions, b.verified) == (0, None)


# ---------------------------------------------------------------- shell writes seen in real claw tasks


@pytest.mark.parametrize(
    ("steps", "writes", "verified"),
    [
        # an HTTP write, then a GET of the collection above it
        ([("shell", {"command": 'curl -sf -X DELETE "$CLAW_API/calendar/events/e3"'}, "{}"),
          ("shell", {"command": 'curl -s "$CLAW_API/calendar/events"'}, "[]")], 1, True),
        # a GET of an unrelated collection does not verify it
        ([("shell", {"command": "curl -s -X POST -d '{}' http://127.0.0.1:9/mail/send"}, "{}"),
          ("shell", {"command": "curl -s http://127.0.0.1:9/calendar/events"}, "[]")], 1, False),
        # SQL writes through sqlite3, read back with a SELECT on the same database
        ([("shell", {"command": "sqlite3 app.db \"UPDATE orders SET status='shipped' WHERE id=3\""}, ""),
          ("shell", {"command": "sqlite3 app.db 'SELECT status FROM orders WHERE id=3'"}, "shipped")], 1, True),
        # a SELECT alone is not a write
        ([("shell", {"command": "sqlite3 app.db 'SELECT 1'"}, "1")], 0, None),
        # python writing a file, then the file is read
        ([("shell", {"command": "python3 -c \"import json; json.dump([], open('out.json', 'w'))\""}, ""),
          ("shell", {"command": "cat out.json"}, "[]")], 1, True),
        # git commit, then git log
        ([("shell", {"command": "cd repo && git commit -qam 'x'"}, ""),
          ("shell", {"command": "git -C repo log --oneline -1"}, "abc x")], 1, True),
    ],
)
def test_shell_write_kinds(steps: list, writes: int, verified: bool | None) -> None:
    b = rollout_behaviour(traj(steps))
    assert (b.write_actions, b.verified) == (writes, verified)


def test_capabilities_as_required_tools() -> None:
    task = Task(id="t1", instruction="x", required_tools=("shell", "http", "sql"))
    t = traj([("Bash", {"command": "curl -s $API/x | python3 -m json.tool"}, "{}")], api="messages")
    assert rollout_behaviour(t, task).covered_tools == ["shell", "http"]  # Bash is a shell; curl is http
    t2 = traj([("Bash", {"command": "cat http.log"}, "")], api="messages")
    assert rollout_behaviour(t2, task).covered_tools == ["shell"]  # a file named http.log is not HTTP
