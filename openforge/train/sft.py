"""SFT data → samples → steps, pure: export (chat and token formats), samples, training steps.

Owns: :func:`chat_record` / :func:`token_records` / :func:`export_sft` (JSONL or Parquet, loadable
with HF ``datasets``), :func:`rendered_record`, :func:`load_token_samples`, :func:`sft_samples`,
:func:`sft_train` and :func:`policy_renderer`. No rollouts run here: the teacher rollouts and the
cached warm-start the ``claw-grpo`` cpu preset runs before GRPO (the untrained SmolLM2-135M never
emits a tool call) are on the orchestration side, :mod:`openforge.runner.teacher`.

Chat format, one row per successful trajectory: ``messages`` (the final call's conversation in
OpenAI chat form, the last assistant turn included, tool calls with JSON-string arguments),
``tools`` (JSON text: tool schemas differ between rows, and a JSON column keeps every row loadable
into one Arrow schema), ``task_id``, ``reward``, ``harness``. Token format: ``input_ids``,
``loss_mask`` (1 exactly on teacher-generated tokens), ``task_id``, ``rollout_id`` — what the CPU
trainer consumes directly. An *exact* trajectory gives one row per segment (the recorded ids).

Inexact teachers. A pass-through teacher (``openai:URL``) returns text, not token ids: its calls
are recorded ``exact: false`` and never form RL segments. For SFT :func:`rendered_record`
re-renders the final conversation with the policy's chat template (tools included) — prompt turns
with loss mask 0, each assistant turn (through its end-of-turn token) with mask 1 — so such
teachers train the warm-start and export as ``tokens`` too.

LoRA. With ``trainer.cpu.lora`` set, :func:`sft_train` trains the LoRA adapter too (the one the run's GRPO
trainer attached, :mod:`openforge.train.lora`), never the base: the warm-start and GRPO are one adapter on
the run's starting model, so every checkpoint is that base plus one adapter. ``sft.lr`` applies to it as
given (LoRA usually wants a larger learning rate than full fine-tuning).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.trajectory import Trajectory
from ..proxy.canonical import to_openai_messages, to_openai_tool_call
from .grpo import TrainSample

__all__ = [
    "chat_record",
    "export_sft",
    "load_token_samples",
    "policy_renderer",
    "rendered_record",
    "sft_samples",
    "sft_train",
    "token_records",
]


# ------------------------------------------------------------------------------------ export


def _assistant(call: Any) -> dict[str, Any]:
    resp = call.response or {}
    msg: dict[str, Any] = {"role": "assistant", "content": resp.get("text") or ""}
    tcs = resp.get("tool_calls") or []
    if tcs:
        msg["tool_calls"] = [to_openai_tool_call(tc.get("name"), tc.get("arguments"), tc.get("id"), i)
                             for i, tc in enumerate(tcs)]
    return msg


def _row_message(m: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as a chat row holds it: ``content`` always a string (non-text parts as JSON)."""
    content = m.get("content")
    return {**m, "content": content if isinstance(content, str) else json.dumps(content) if content is not None
            else ""}


def chat_record(traj: Trajectory) -> dict[str, Any] | None:
    """The trajectory as one chat-format SFT row (None when no chat-API call was recorded)."""
    calls = [c for c in traj.calls if c.api == "chat" and isinstance(c.request.get("messages"), list)]
    if not calls:
        return None
    last = calls[-1]
    messages = [_row_message(m) for m in to_openai_messages(last.request["messages"])] + [_assistant(last)]
    for m in messages:  # one schema for every row: absent keys become empty values
        m.setdefault("tool_calls", [])
        m.setdefault("tool_call_id", "")
    return {"messages": messages, "tools": json.dumps(last.request.get("tools") or []), "task_id": traj.task_id,
            "rollout_id": traj.rollout_id, "reward": float(traj.reward), "harness": traj.harness or ""}


def token_records(traj: Trajectory, renderer: Any = None) -> list[dict[str, Any]]:
    """Token-format rows of one trajectory.

    Exact calls: one row per segment (the recorded ids). A trajectory whose calls are inexact
    (pass-through teacher) and so has no segment: one row re-rendered by :func:`rendered_record`
    with ``renderer`` (the policy's :class:`~openforge.proxy.render.Renderer`); none without one.
    """
    segs = traj.segments if traj.segments or not traj.calls else traj.build().segments
    rows = [{"input_ids": list(s.input_ids), "loss_mask": list(s.loss_mask), "task_id": traj.task_id,
             "rollout_id": traj.rollout_id, "reward": float(traj.reward)} for s in segs if s.num_trained_tokens]
    if not rows and renderer is not None and any(not c.exact for c in traj.calls):
        rec = rendered_record(traj, renderer)
        if rec is not None:
            rows.append(rec)
    return rows


def _template_message(m: dict[str, Any]) -> dict[str, Any]:
    """A chat-record message as chat templates take it (tool-call arguments as objects)."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = []
        for tc in m["tool_calls"]:
            args = tc["function"]["arguments"]
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except ValueError:
                pass  # not JSON: rendered as the string it is
            out["tool_calls"].append({"id": tc.get("id", ""), "type": "function",
                                      "function": {"name": tc["function"]["name"], "arguments": args}})
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def rendered_record(traj: Trajectory, renderer: Any) -> dict[str, Any] | None:
    """The trajectory's final conversation re-rendered with the policy's template, loss on assistant turns.

    Each assistant turn is the text the template adds between the conversation before it (with the
    generation prompt) and the conversation through it, cut after the end-of-turn token. Raises
    :class:`ConfigError` when the template is not prefix-stable (a later render rewrites an earlier
    turn), since the mask could then not be placed on the assistant's tokens.
    """
    rec = chat_record(traj)
    if rec is None:
        return None
    msgs = [_template_message(m) for m in rec["messages"]]
    tools = json.loads(rec["tools"]) or None
    eos = renderer.eos_text
    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        prompt = renderer.text(msgs[:i], tools, gen=True)
        full = renderer.text(msgs[: i + 1], tools, gen=False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise ConfigError(f"rollout {traj.rollout_id}: the policy's chat template re-renders earlier turns "
                              "differently, so an inexact teacher's turns cannot be masked for SFT")
        turn = full[len(prompt):]
        cut = turn.find(eos) + len(eos) if eos and eos in turn else len(turn)
        for text, m_val in ((prompt[len(done):], 0), (turn[:cut], 1)):
            piece = renderer.encode(text) if text else []
            ids += piece
            mask += [m_val] * len(piece)
        done = prompt + turn[:cut]
    if not any(mask):
        return None
    return {"input_ids": ids, "loss_mask": mask, "task_id": traj.task_id, "rollout_id": traj.rollout_id,
            "reward": float(traj.reward)}


def _write(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix in (".jsonl", ".json"):
        with path.open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    else:
        raise ConfigError(f"{path}: export format is chosen by the extension: .jsonl or .parquet")
    return path


def export_sft(trajs: Iterable[Trajectory], path: str | Path, *, fmt: str = "chat",
               min_reward: float = 1.0, renderer: Any = None) -> dict[str, Any]:
    """Write successful trajectories (reward ≥ ``min_reward``) as ``chat`` or ``tokens`` rows.

    ``renderer`` (the policy's) lets ``tokens`` rows come from inexact (pass-through teacher)
    trajectories too; ``rendered`` in the result counts the trajectories exported that way."""
    if fmt not in ("chat", "tokens"):
        raise ConfigError(f"format must be 'chat' or 'tokens', got {fmt!r}")
    keep = [t for t in trajs if t.trainable and t.reward >= min_reward]
    rows: list[dict[str, Any]] = []
    rendered = 0
    for t in keep:
        if fmt == "chat":
            r = chat_record(t)
            if r is not None:
                rows.append(r)
        else:
            recs = token_records(t, renderer)
            rendered += bool(recs) and not any(s.num_trained_tokens for s in t.segments)
            rows.extend(recs)
    _write(rows, Path(path))
    return {"path": str(path), "format": fmt, "trajectories": len(keep), "rows": len(rows), "rendered": rendered}


def load_token_samples(path: str | Path) -> list[TrainSample]:
    """Read a ``tokens`` export back as SFT samples."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    bad = [i for i, r in enumerate(rows) if "input_ids" not in r or "loss_mask" not in r]
    if bad:
        raise ConfigError(f"{path}: rows {bad[:5]} lack input_ids/loss_mask (export with --format tokens)")
    return [TrainSample(input_ids=list(r["input_ids"]), loss_mask=list(r["loss_mask"]),
                        old_logprobs=[0.0] * len(r["input_ids"]), advantage=0.0,
                        token_weights=[float(m) for m in r["loss_mask"]], task_id=r.get("task_id", ""),
                        rollout_id=r.get("rollout_id", "")) for r in rows]


# ------------------------------------------------------------------------------------ training


def sft_samples(trajs: Iterable[Trajectory], renderer: Any = None) -> list[TrainSample]:
    """SFT rows of the trajectories (inexact ones re-rendered when ``renderer`` is given)."""
    out = []
    for t in trajs:
        for r in token_records(t, renderer):
            out.append(TrainSample(input_ids=r["input_ids"], loss_mask=r["loss_mask"],
                                   old_logprobs=[0.0] * len(r["input_ids"]), advantage=0.0,
                                   token_weights=[float(m) for m in r["loss_mask"]], task_id=t.task_id,
                                   rollout_id=t.rollout_id))
    return out


def sft_train(model: Any, samples: Sequence[TrainSample], *, lr: float, epochs: int, batch_size: int,
              max_steps: int | None = None, seed: int = 0, trainer_config: Any = None,
              autocast_bf16: bool = False, log: Any = None,
              stop: threading.Event | None = None) -> dict[str, Any]:
    """Token-mean cross-entropy on ``loss_mask == 1`` tokens, AdamW, ``batch_size`` samples per step.
    ``stop`` set raises :class:`~openforge.core.errors.TrainingStopped` between micro-batches."""
    import random

    from ..util.heap import release_memory
    from .cpu import CPUTrainer, CPUTrainerConfig

    base = trainer_config.model_dump() if trainer_config is not None else {}
    base.update(lr=lr, kl_coef=0.0, temperature=1.0, autocast_bf16=autocast_bf16)
    trainer = CPUTrainer(model, CPUTrainerConfig(**base))
    rng = random.Random(seed)
    losses, tokens, steps = [], 0, 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        order = list(samples)
        rng.shuffle(order)
        for i in range(0, len(order), batch_size):
            batch = order[i:i + batch_size]
            n = sum(s.num_trained_tokens for s in batch)
            weighted = [TrainSample(input_ids=s.input_ids, loss_mask=s.loss_mask, old_logprobs=s.old_logprobs,
                                    advantage=0.0, token_weights=[m / n for m in s.loss_mask]) for s in batch]
            m = trainer.step(weighted, kind="sft", stop=stop)
            losses.append(m["loss"])
            tokens += n
            steps += 1
            if log:
                log(f"sft step {steps}: loss {m['loss']:.4f} ({m['train_time_s']:.1f}s)")
            if max_steps and steps >= max_steps:
                break
        if max_steps and steps >= max_steps:
            break
    del trainer  # its AdamW state dies with the warm-start (GRPO keeps an optimizer of its own) ...
    release_memory()  # ... and the pages it and the steps' activations held go back to the system
    return {"steps": steps, "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
            "trained_tokens": tokens, "time_s": time.perf_counter() - t0}


def policy_renderer(tokenizer: Any) -> Any:
    """The policy's renderer: the chat template the proxy serves it with (tools included)."""
    from ..proxy.render import Renderer

    return Renderer(tokenizer)


def _no_samples(good: Sequence[Trajectory], n_tasks: int, counts: dict[str, int], run_dir: Path) -> str:
    """Why the teacher gave no SFT sample, in the teacher's terms."""
    if not good:
        return f"SFT warm-start: the teacher solved none of {n_tasks} tasks (statuses {counts}); see {run_dir}"
    calls = [c for t in good for c in t.calls]
    if not calls:
        why = "they recorded no model call"
    elif all(not c.exact for c in calls):
        why = ("all their calls are inexact (a pass-through teacher) and none could be re-rendered as a chat "
               "conversation with an assistant turn (no chat-API call recorded)")
    else:
        why = "none of their calls generated a token that could be trained"
    return f"SFT warm-start: {len(good)} teacher rollout(s) succeeded but {why}; see {run_dir}"
