"""A small, realistic training run directory for the report tests (and the README screenshot).

Six GRPO steps on three claw-style tasks; as training goes on the policy moves from the generic
shell to the service tools, verifies more and succeeds more — the shape of the paper's findings.
One rollout per step has its history compacted (a ``history_rewritten`` segment break) and one
is an infrastructure failure.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .factory import encode, traj

TASKS = {
    "calendar-book": ("calendar", ["calendar_list_events", "calendar_create_event"], ["found_slot", "booked"]),
    "notes-summary": ("files", ["read", "write"], ["read_notes", "wrote_summary"]),
    "inbox-triage": ("email", ["email_list", "email_archive"], ["listed", "archived"]),
}


def _steps(task: str, p_specific: float, p_verify: float, rng: random.Random) -> list[tuple]:
    OK, FAIL = "Process exited with code 0", "Process exited with code 1\nError: unknown flag --today"
    if task == "calendar-book":
        if rng.random() < p_specific:
            s = [("calendar_list_events", {"day": "2026-12-01"}, '[{"title": "standup", "start": "09:00"}]'),
                 ("calendar_create_event", {"title": "1:1 with Ana", "start": "10:00"}, '{"id": 7}')]
        else:
            s = [("bash", {"command": "gcal list --today"}, FAIL),
                 ("bash", {"command": "curl -s http://127.0.0.1:8931/events"}, '[{"title": "standup"}]'),
                 ("bash", {"command": "curl -s -X POST -d '{\"title\":\"1:1\"}' http://127.0.0.1:8931/events"}, OK)]
        if rng.random() < p_verify:
            s.append(("calendar_list_events", {"day": "2026-12-01"}, '[{"title": "standup"}, {"title": "1:1 with Ana"}]'))
        return s
    if task == "notes-summary":
        s = [("read", {"path": "notes/meeting.md"}, "# Meeting\n- ship v2 on Friday\n- Ana owns the release notes"),
             ("write", {"path": "summary.md", "content": "Ship v2 Friday; Ana writes release notes."}, "ok")]
        if rng.random() >= p_specific:
            s[0] = ("bash", {"command": "cat notes/meeting.md"}, "# Meeting\n- ship v2 on Friday")
        if rng.random() < p_verify:
            s.append(("bash", {"command": "cat summary.md"}, "Ship v2 Friday; Ana writes release notes."))
        return s
    s = [("email_list", {"folder": "inbox"}, '[{"id": 1, "from": "newsletter"}, {"id": 2, "from": "boss"}]'),
         ("email_archive", {"id": 1}, '{"archived": 1}')]
    if rng.random() >= p_specific:
        s = [("bash", {"command": "mailctl ls"}, "bash: mailctl: command not found"), *s]
    return s


def write_demo_run(root: Path, *, steps: int = 6, group: int = 3, seed: int = 7) -> Path:
    """Write ``root`` as a training run directory: config.yaml, metrics.jsonl, trajectories/step_N/."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(
        "model:\n  name: smollm2-135m\nharness:\n  name: react\nenv:\n  name: claw\n"
        "trainer:\n  algorithm: grpo\n  lr: 1.0e-05\n  group_size: 3\n"
    )
    metrics = []
    for step in range(steps):
        progress = step / max(1, steps - 1)
        p_ok, p_specific, p_verify = 0.25 + 0.6 * progress, 0.2 + 0.7 * progress, 0.15 + 0.6 * progress
        out = root / "trajectories" / f"step_{step:04d}"
        out.mkdir(parents=True, exist_ok=True)
        rewards, statuses = [], {}
        for task, (category, required, subgoals) in TASKS.items():
            for g in range(group):
                ok = rng.random() < p_ok
                status = "success" if ok else "policy_failure"
                if step == 2 and g == 2 and task == "inbox-triage":
                    status = "infra_error"
                tr = traj(
                    _steps(task, p_specific, p_verify, rng), api=rng.choice(["chat", "responses", "messages"]),
                    status=status, reward=1.0 if ok else round(0.5 * rng.random(), 2), task_id=task,
                    rollout_id=f"s{step}-{task}-{g}", final="Done." if ok else "I could not finish the task.",
                    token_ids=True, harness="react", environment="claw",
                    rewards={subgoals[0]: 1.0, subgoals[1]: 1.0 if ok else 0.0},
                    metadata={"category": category, "required_tools": required, "subgoals": subgoals, "step": step},
                )
                if g == 1 and len(tr.calls) > 2:  # a compacted history: the harness rewrote the context
                    calls = list(tr.calls)
                    c = calls[2]
                    keep = calls[0].prompt_ids + encode("[summary of 2 earlier tool calls]\n<|assistant|>")
                    calls[2] = c.model_copy(update={"prompt_ids": keep})
                    tr = tr.model_copy(update={"calls": calls}).build()
                if status == "infra_error":
                    tr = tr.model_copy(update={"error": "sandbox pod evicted (node pressure)", "reward": 0.0})
                (out / f"{tr.rollout_id}.json").write_text(tr.to_json(indent=1))
                statuses[status] = statuses.get(status, 0) + 1
                if status != "infra_error":
                    rewards.append(tr.reward)
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        metrics.append({"step": step, "reward_mean": round(mean, 4), "reward_std": round(std, 4),
                        "pass_rate": round(sum(r >= 1.0 for r in rewards) / len(rewards), 4),
                        "statuses": statuses, "tokens": 1000 + 50 * step, "step_time_s": 12.5})
    (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return root
