"""The list commands print machine-readable JSON with ``--json``; ``forge recipe list`` never cuts a
description."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.recipes import recipe_config
from openforge.util.console import LOG_WIDTH, new_console

runner = CliRunner()


def _json(*args: str) -> object:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_env_tasks_and_env_list_json():
    tasks = _json("env", "tasks", "claw", "--split", "eval")
    assert isinstance(tasks, list) and len(tasks) == 12
    assert {"id", "split", "category", "instruction", "timeout_s", "required_tools"} <= set(tasks[0])
    assert all(t["split"] == "eval" for t in tasks)
    envs = {e["name"]: e for e in _json("env", "list")}
    assert envs["claw"]["splits"]["eval"] == 12


def test_harness_list_json_names_wire_apis_install_state_and_options():
    rows = {r["name"]: r for r in _json("harness", "list")}
    assert {"react", "pi", "codex", "claude-code", "openclaw"} <= set(rows)
    assert rows["react"]["installed"] is True and rows["react"]["wire_api"] == "chat"
    assert rows["pi"]["wire_api"] == "chat|responses|messages"
    assert rows["pi"]["options"] == ["binary", "env", "extra_args", "wire_api"]
    assert "max_turns" in rows["react"]["options"]


def test_recipe_list_json_and_full_descriptions():
    rows = {r["name"]: r for r in _json("recipe", "list")}
    assert rows["claw-grpo"]["default_preset"] == "cpu" and "verl" in rows["claw-grpo"]["presets"]
    desc = " ".join(recipe_config("claw-sft")["description"].split())
    assert rows["claw-sft"]["description"] == desc
    table = runner.invoke(app, ["recipe", "list"]).output
    # wrapped, not cut: every word of every description is in the table, the last one included
    cells = " ".join(line.split("│")[3] for line in table.splitlines() if line.count("│") == 4)
    for name in rows:
        words = rows[name]["description"].split()
        assert " ".join(words) in " ".join(cells.split()), name


def test_a_table_piped_to_a_log_keeps_whole_cells(monkeypatch):
    """Not a terminal (CliRunner, a CI log, nohup): rich's 80-column fallback cut install paths to "…";
    the console is LOG_WIDTH wide there instead, and $COLUMNS still wins."""
    monkeypatch.delenv("COLUMNS", raising=False)
    rows = _json("harness", "list")
    table = runner.invoke(app, ["harness", "list"]).output
    assert "…" not in table, table
    for r in rows:
        for word in (r.get("detail") or r.get("install") or "").split():
            assert word in table, (r["name"], word)
    monkeypatch.setenv("COLUMNS", "100")
    assert new_console().width == 100
    monkeypatch.delenv("COLUMNS")
    assert new_console().width >= LOG_WIDTH
