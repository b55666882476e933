"""Faults are seeded per task group: identical for GRPO siblings, different across groups; bad fault
declarations are refused in the caller's terms."""

from __future__ import annotations

import pytest

from openforge.core.errors import ConfigError
from openforge.core.task import Task
from openforge.faults.spec import parse_fault_config, parse_faults, plan_faults
from openforge.plugins import make_environment
from openforge.runner.rollout import run_groups

MIX = {"faults": [{"kind": "flaky_command"}, {"kind": "permission_denied"}, {"kind": "missing_tool"},
                  {"kind": "corrupt_state"}], "fraction": 0.5, "per_episode": 2}


def _task(seed):
    return Task(id="t", instruction="x", metadata={"group_seed": seed, "solution": ["sqlite3 app.db 'x' > a.txt"]})


def _plan(seed, cfg=MIX):
    faulty, specs = plan_faults(_task(seed), parse_fault_config(cfg))
    return faulty, tuple(s.kind for s in specs)


def test_same_group_same_faults_other_groups_differ():
    assert all(_plan(s) == _plan(s) for s in range(50))  # a function of (task id, group seed) only
    plans = [_plan(s) for s in range(200)]
    faulty = [p for p in plans if p[0]]
    assert 70 < len(faulty) < 130  # fraction 0.5 of the groups
    assert all(len(p[1]) == 2 for p in faulty) and len({p[1] for p in faulty}) >= 6
    assert all(p == (False, ()) for p in plans if not p[0])
    other = Task(id="u", instruction="x", metadata={"group_seed": 3})
    assert [plan_faults(other, parse_fault_config(MIX))[0] for _ in range(3)] == [plan_faults(other, parse_fault_config(MIX))[0]] * 3


def test_service_faults_only_where_the_task_has_services():
    env = make_environment("claw")
    cfg = parse_fault_config({"faults": [{"kind": "service_unavailable"}]})
    with_svc, without = env.task("issues-close"), env.task("files-count-lines")
    assert plan_faults(with_svc, cfg)[0] and not plan_faults(without, cfg)[0]


def test_bad_declarations_are_refused_with_where():
    with pytest.raises(ConfigError) as e:
        parse_faults([{"kind": "service_unavailable", "calls": 0}, {"kind": "gremlins"}, {"path": "x"}], "task.toml: faults")
    text = str(e.value)
    assert "task.toml: faults[0].calls" in text and "greater than or equal to 1" in text
    assert "task.toml: faults[1]" in text and "flaky_command" in text  # names the kinds there are
    assert "task.toml: faults[2]" in text
    with pytest.raises(ConfigError, match=r"env.options.faults.fraction"):
        parse_fault_config({"fraction": 2})
    with pytest.raises(ConfigError, match=r"env.options.faults: a mapping"):
        parse_fault_config("503")
    with pytest.raises(ConfigError, match=r"env.options.faults.faults\[0\].command"):
        parse_fault_config([{"kind": "flaky_command", "command": "rm -rf /"}])


def test_task_toml_faults_are_checked_at_load(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    (d / "instruction.md").write_text("x")
    (d / "verify.sh").write_text("true\n")
    (d / "task.toml").write_text('[[faults]]\nkind = "permission_denied"\nmode = "rw"\n')
    with pytest.raises(ConfigError, match=r"task.toml: faults\[0\].mode"):
        make_environment(str(d))
    (d / "task.toml").write_text('[[faults]]\nkind = "permission_denied"\npath = "a.txt"\n')
    env = make_environment(str(d))
    assert type(env).__name__ == "FaultyEnvironment"
    assert env.task("t").metadata["faults"][0]["path"] == "a.txt"


async def test_siblings_share_faults_in_real_groups(rig):
    pytest.importorskip("openai")
    from openforge.harnesses.react import ReactHarness

    env = make_environment("claw", faults={"faults": [{"kind": "flaky_command"}, {"kind": "permission_denied"},
                                                     {"kind": "missing_tool"}], "per_episode": 2})
    cmd = "sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active=1' > answer.txt"
    proxy, launcher, store = await rig({"turns": [{"shell": cmd}, {"tool": {"name": "finish", "arguments": {"answer": "ok"}}}]})
    task = env.task("sqlite-count-active")
    groups = await run_groups([task, task, task], 2, 3, harness=lambda: ReactHarness(max_turns=3), environment=env,
                              launcher=launcher, proxy=proxy, store=store, progress=False)
    assert len(groups) == 3 and not groups.discarded
    seen = []
    for g in groups:
        plans = [tuple((i["kind"], i["target"]) for i in t.metadata["faults"]["injected"]) for t in g.trajectories]
        seeds = {t.metadata["faults"]["seed"] for t in g.trajectories}
        assert len(set(plans)) == 1 and len(plans[0]) == 2 and len(seeds) == 1, plans  # siblings: the same faults
        assert {t.metadata["slot"] for t in g.trajectories} == {0, 1}
        seen.append((seeds.pop(), plans[0]))
    assert len({s for s, _ in seen}) == 3  # every group has its own seed


def test_default_targets_are_programs_the_solution_runs():
    from openforge.faults.inject import solution_programs

    line = "X=1 sqlite3 app.db \"select count(*) from t\" | tr -d ' ' > a.txt && cd repo && git commit -qam 'a; b'"
    assert solution_programs([line, "python3 -c \"print(open('f').read())\"", "wc -l < d.txt"]) == \
        ["sqlite3", "tr", "git", "wc"]  # not `open` from a quoted Python program, not python3, not cd
