"""The self-contained HTML run report (``forge report``).

Owns: :func:`build_report` (a run directory → one HTML string) and :func:`write_report`.
Everything is inline — CSS, a few lines of JS for the trajectory picker, SVG charts — so the
file opens offline and fetches nothing. Sections: headline numbers, reward and pass-rate curves
over training steps (from ``metrics.jsonl``), behaviour metrics over steps (computed from the
saved trajectories), status breakdown, eval summary (``eval.json`` or computed), and a
trajectory viewer: each call's new messages, answer, tool calls and results, and every
segment's tokens with trained (loss mask 1) tokens highlighted and its break reason shown.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.trajectory import Trajectory
from ..readings.steps import is_error_result
from .compare import COMPARE_ROWS, FAULT_ROWS, fmt_value, run_summary
from .metrics import summarize_behaviour
from .rundir import RunData, trajectory_step
from .svg import Series, line_chart, stacked_bar, stacked_columns
from .view import new_request_entries, response_entries, token_runs

__all__ = ["build_report", "write_report"]

Detokenize = Callable[[Sequence[int]], str]

_ALIASES = {
    "step": ("step", "iteration", "global_step"),
    "reward": ("reward_mean", "mean_reward", "reward", "reward/mean"),
    "reward_std": ("reward_std", "std_reward", "reward/std"),
    "pass_rate": ("pass_rate", "success_rate", "pass@1", "pass_at_1"),
    "trained_tokens": ("trained_tokens", "train/trained_tokens"),
    "loss": ("loss", "train/loss"),
}
#: A per-step flag saying whether the optimizer stepped (absent in older runs: then trained tokens decide).
_GRADIENT_FLAGS = ("gradient_step", "train/gradient_step")
_BEHAVIOUR_CURVES = [
    ("generic_shell_share", "generic shell"),
    ("self_verification_rate", "self-verification"),
    ("required_tool_coverage", "required tools"),
    ("error_recovery_rate", "error recovery"),
    ("plan_completion_rate", "plan completion"),
    ("fault_recovery_rate", "fault recovery"),
]
_MAX_CONTEXT_CHARS = 1200
_MAX_TRAINED_CHARS = 6000


def _get(row: dict[str, Any], key: str) -> float | None:
    for alias in _ALIASES[key]:
        v = row.get(alias)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _policy_rows(run: RunData) -> list[dict[str, Any]]:
    """``metrics.jsonl`` lines of training steps (the SFT warm-start's line is not a step)."""
    return [row for row in run.metrics if row.get("phase") != "sft"]


def _sft_row(run: RunData) -> dict[str, Any] | None:
    return next((row for row in run.metrics if row.get("phase") == "sft"), None)


def _x(row: dict[str, Any], i: int) -> float:
    step = _get(row, "step")
    return step if step is not None else float(i)


def _trained_nothing(row: dict[str, Any]) -> bool:
    """A step without a gradient step: flagged so, skipped by the trainer, or 0 trained tokens."""
    flag = next((row[k] for k in _GRADIENT_FLAGS if k in row), None)
    if flag is not None:
        return not flag
    if row.get("train/skipped") or row.get("skipped"):
        return True
    tokens = _get(row, "trained_tokens")
    return tokens is not None and tokens <= 0


def _reward_range(rows: list[dict[str, Any]], run: RunData) -> tuple[float, float]:
    """Where rewards can lie: [0, 1] unless the run's rewards go outside it (then their extremes)."""
    seen = [r for row in rows if (r := _get(row, "reward")) is not None]
    seen += [t.reward for t in run.policy_trajectories]
    return min([0.0, *seen]), max([1.0, *seen])


def _training_charts(rows: list[dict[str, Any]]) -> tuple[dict[str, str], list[float]]:
    """Trained tokens and loss per step, and the steps that trained nothing (drawn in red at 0)."""
    tokens, loss, idle = [], [], []
    for i, row in enumerate(rows):
        x, n, lv = _x(row, i), _get(row, "trained_tokens"), _get(row, "loss")
        if _trained_nothing(row):
            idle.append(x)
        elif n is not None:
            tokens.append((x, n))
        if lv is not None and not _trained_nothing(row):
            loss.append((x, lv))
    top = max([n for _, n in tokens] + [1.0])
    series = [Series("trained tokens", tokens, color="#2563eb"),
              Series("trained nothing", [(x, 0.0) for x in idle], color="#dc2626")]
    return {
        "tokens": line_chart([s for s in series if s.points], title="Trained tokens per step",
                             y_range=(0.0, top), chart_id="chart-trained"),
        "loss": line_chart([Series("loss", loss, color="#9333ea")], title="Loss per step", chart_id="chart-loss"),
    }, idle


_DIAG_SHARES = [("diag/tied_share", "tied groups", "#dc2626"), ("diag/pass_spread", "pass-rate spread", "#16a34a"),
                ("diag/clip_frac", "clipped tokens", "#d97706")]
_DIAG_SINGLE = [("diag/grad_norm", "Gradient norm per step", "#2563eb", "chart-diag-grad"),
                ("diag/kl_step", "KL moved per step (k3)", "#9333ea", "chart-diag-kl"),
                ("diag/entropy_est", "Sampled-token entropy estimate (nats)", "#0891b2", "chart-diag-entropy")]


def _diag_points(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    return [(_x(row, i), float(v)) for i, row in enumerate(rows)
            if isinstance(v := row.get(key), (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _diag_charts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The "why isn't GRPO learning?" panel (``diag/`` keys, :mod:`openforge.analysis.diagnose`) and the
    run's verdict; empty for a run without them."""
    if not any(k.startswith("diag/") for row in rows for k in row):
        return {}
    from .diagnose import diagnose

    shares = [Series(label, _diag_points(rows, key), color=c) for key, label, c in _DIAG_SHARES]
    charts = {"diag_shares": line_chart([s for s in shares if s.points], title="Tied groups, pass-rate spread, "
                                        "clipped tokens", y_range=(0.0, 1.0), chart_id="chart-diag-shares")}
    for key, title, color, cid in _DIAG_SINGLE:
        charts[cid.removeprefix("chart-").replace("-", "_")] = line_chart(
            [Series(key.removeprefix("diag/"), _diag_points(rows, key), color=color)], title=title, chart_id=cid)
    return {**charts, "verdict": diagnose(rows)}


def _curves(run: RunData) -> dict[str, Any]:
    rows = _policy_rows(run)
    lo, hi = _reward_range(rows, run)
    reward, passr, band = [], [], []
    for i, row in enumerate(rows):
        x = _x(row, i)
        r, s, p = _get(row, "reward"), _get(row, "reward_std"), _get(row, "pass_rate")
        if r is not None:
            reward.append((x, r))
            if s is not None:  # mean ± std, clipped to where rewards can lie
                band.append((x, max(lo, r - s), min(hi, r + s)))
        if p is not None:
            passr.append((x, p))
    by_step = {s: summarize_behaviour(run.at_step(s)) for s in run.steps}
    if not reward and by_step:  # no metrics.jsonl: derive the curves from the trajectories
        for s in sorted(by_step):
            valid = [t for t in run.at_step(s) if t.status.trainable]
            if valid:
                reward.append((float(s), sum(t.reward for t in valid) / len(valid)))
                passr.append((float(s), sum(str(t.status) == "success" for t in valid) / len(valid)))
    behaviour = [
        Series(label, [(float(s), v) for s, b in sorted(by_step.items()) if (v := getattr(b, key)) is not None])
        for key, label in _BEHAVIOUR_CURVES
    ]
    per_step: list[tuple[float, dict[str, int]]] = []
    for i, row in enumerate(rows):
        st = row.get("statuses")
        if isinstance(st, dict):
            per_step.append((_x(row, i), {str(k): int(v) for k, v in st.items()}))
    if not per_step:
        per_step = [(float(s), dict(Counter(str(t.status) for t in run.at_step(s)))) for s in run.steps]
    training, idle = _training_charts(rows)
    has_training = any(_get(r, "trained_tokens") is not None or _get(r, "loss") is not None or _trained_nothing(r)
                       for r in rows)
    return {
        "statuses": stacked_columns(per_step, title="Rollout statuses per step", chart_id="chart-statuses"),
        "reward": line_chart([Series("reward mean", reward, band=band)], title="Reward (mean ± std) per step",
                             chart_id="chart-reward"),
        "pass": line_chart([Series("pass rate", passr, color="#16a34a")], title="Pass rate per step",
                           y_range=(0.0, 1.0), chart_id="chart-pass"),
        "behaviour": line_chart([s for s in behaviour if s.points], title="Behaviour metrics per step",
                                y_range=(0.0, 1.0), chart_id="chart-behaviour", width=1060),
        **(training if has_training else {}),
        **_diag_charts(rows),
        "idle_steps": [int(x) if x == int(x) else x for x in idle],
    }


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit:,} characters elided] …\n{text[-half:]}"


def _traj_view(traj: Trajectory, detokenize: Detokenize | None, dom_id: str) -> dict[str, Any]:
    calls = sorted(traj.calls, key=lambda c: c.index)
    skipped = (traj.metrics or {}).get("skipped_calls") or {}
    seg_of = {ci: si for si, seg in enumerate(traj.segments) for ci in seg.call_indices}
    call_views = []
    prev = None
    for c in calls:
        new, rewritten = new_request_entries(c, prev)
        prev = c
        inputs = [
            {**e.__dict__, "text": _clip(e.text, 4000),
             "failed": e.kind == "tool_result" and is_error_result(e.text, e.error)}
            for e in new
        ]
        call_views.append({
            "index": c.index, "api": c.api, "model": c.model or (c.request or {}).get("model"),
            "status": str(c.status), "exact": c.exact, "finish_reason": c.finish_reason,
            "latency_s": c.latency_s, "prompt_tokens": len(c.prompt_ids), "output_tokens": len(c.output_ids),
            "segment": seg_of.get(c.index), "skipped": skipped.get(str(c.index)), "error": c.error,
            "rewritten": rewritten, "inputs": inputs,
            "outputs": [{**e.__dict__, "text": _clip(e.text, 4000)} for e in response_entries(c)],
        })
    seg_views = []
    for si, seg in enumerate(traj.segments):
        runs = []
        for r in token_runs(seg, detokenize):
            runs.append({"trained": r.trained, "count": r.count, "decoded": r.decoded,
                         "text": _clip(r.text, _MAX_TRAINED_CHARS if r.trained else _MAX_CONTEXT_CHARS)})
        seg_views.append({"index": si, "break_reason": str(seg.break_reason), "calls": seg.call_indices,
                          "tokens": len(seg.input_ids), "trained": seg.num_trained_tokens,
                          "reward": seg.reward, "runs": runs})
    return {
        "dom_id": dom_id, "rollout_id": traj.rollout_id, "task_id": traj.task_id, "harness": traj.harness,
        "status": str(traj.status), "reward": traj.reward, "step": trajectory_step(traj), "error": traj.error,
        "phase": (traj.metadata or {}).get("phase"), "trial": (traj.metadata or {}).get("trial"),
        "calls": call_views, "segments": seg_views, "n_calls": len(calls),
    }


def _pick(trajs: list[Trajectory], limit: int) -> list[Trajectory]:
    ordered = sorted(trajs, key=lambda t: (trajectory_step(t) or 0, t.task_id, t.rollout_id))
    if len(ordered) <= limit:
        return ordered
    stride = len(ordered) / limit
    return [ordered[int(i * stride)] for i in range(limit)]


def _summary_rows(run: RunData) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
    if not run.trajectories and run.eval is None:
        return [], None
    summary = run_summary(run)
    flat = summary.model_dump()
    rows = []
    for key, label, kind in COMPARE_ROWS:
        if key in ("harness", "infra_failures") or (summary.k == 1 and key in ("pass_at_k", "pass_hat_k")):
            continue
        if key.startswith("behaviour."):
            value = (flat.get("behaviour") or {}).get(key.split(".", 1)[1])
            if value is None and key in FAULT_ROWS:
                continue
        else:
            value = flat.get(key)
        label = label.replace("@k", f"@{summary.k}").replace("^k", f"^{summary.k}")
        rows.append((label, fmt_value(value, kind)))
    return rows, flat


def _harness_rows(run: RunData, k: int) -> list[dict[str, str]]:
    """One row per harness when the run's policy rollouts ran under more than one."""
    from .per_harness import harness_summaries

    per = harness_summaries(run.policy_trajectories, k) if run.trajectories else {}
    if len(per) < 2 and run.eval and run.eval.get("per_harness"):
        from .passk import EvalSummary

        per = {h: EvalSummary.model_validate(v) for h, v in run.eval["per_harness"].items()}
    if len(per) < 2:
        return []
    return [{"harness": h, "tasks": str(s.tasks), "trials": str(s.valid_trials), "pass1": fmt_value(s.pass_at_1, "pct"),
             "passk": fmt_value(s.pass_at_k, "pct"), "passhk": fmt_value(s.pass_hat_k, "pct"),
             "reward": fmt_value(s.mean_reward, "float")} for h, s in per.items()]


def _heldout_rows(run: RunData) -> list[dict[str, str]]:
    """The held-out points of a training run (``RUN_DIR/heldout/``: untrained, SFT warm-start, final),
    one row per harness, with SFT's share and GRPO's own share of the change."""
    from .heldout import load_point, shares

    if not run.path.is_dir():
        return []
    points = {p: load_point(run.path, p) for p in ("before", "warmstart", "after")}
    before = points["before"]
    if not before:
        return []
    sh = shares(points)

    def rate(m: dict[str, Any] | None) -> str:
        if not m or not m.get("trials"):
            return "–"
        return f"{m['successes']}/{m['trials']} ({100 * m['pass_rate']:.0f} %, CI {100 * m['ci95'][0]:.0f}–{100 * m['ci95'][1]:.0f} %)"

    def change(d: dict[str, Any] | None) -> str:
        if not d:
            return "–"
        return f"{100 * d['delta']:+.0f} pts [{100 * d['ci95'][0]:+.0f}, {100 * d['ci95'][1]:+.0f}] {d['verdict']}"

    def at(point: str, h: str) -> dict[str, Any] | None:
        p = points[point] or {}
        return p.get("all") if h == "all" else p.get("per_harness", {}).get(h)

    return [{"harness": h, "before": rate(at("before", h)), "warmstart": rate(at("warmstart", h)),
             "after": rate(at("after", h)), "sft": change(sh.get("sft", {}).get(h)),
             "grpo": change(sh.get("grpo", {}).get(h))}
            for h in [*before.get("per_harness", {}), *(["all"] if "all" in before else [])]]


def build_report(run: RunData, *, detokenize: Detokenize | None = None, max_trajectories: int = 200) -> str:
    """Render the report of ``run`` as one self-contained HTML document."""
    import jinja2

    statuses: Counter[str] = Counter(str(t.status) for t in run.policy_trajectories)
    if not statuses and run.eval:
        statuses.update(run.eval.get("statuses") or {})
    summary_rows, flat = _summary_rows(run)
    picked = _pick(run.trajectories, max_trajectories)
    views = [_traj_view(t, detokenize, f"traj-{i}") for i, t in enumerate(picked)]
    cfg = run.config or {}
    cfg_rows = []
    for section in ("model", "backend", "harness", "env", "environment", "split", "trials", "launcher", "trainer", "rollout"):
        v = cfg.get(section)
        if isinstance(v, dict):
            cfg_rows.append((section, ", ".join(f"{k}={v[k]}" for k in list(v)[:6])))
        elif v is not None:
            cfg_rows.append((section, str(v)))
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("openforge.analysis", "templates"),
        autoescape=jinja2.select_autoescape(["html", "jinja"]),
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["fmt"] = lambda v, kind="float": fmt_value(v, kind)
    return env.get_template("report.html.jinja").render(
        name=run.name, path=str(run.path),
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        config_rows=cfg_rows, charts=_curves(run), status_bar=stacked_bar(dict(statuses)),
        statuses=sorted(statuses.items(), key=lambda kv: -kv[1]),
        steps=len(_policy_rows(run)) or len(run.steps), sft=_sft_row(run), rollouts=len(run.trajectories),
        summary_rows=summary_rows, summary=flat,
        harness_rows=_harness_rows(run, int((flat or {}).get("k") or 1)), heldout_rows=_heldout_rows(run),
        trajectories=views, shown=len(views), detokenized=detokenize is not None,
        teacher=len(run.trajectories) - len(run.policy_trajectories),
        by_step=any(v["step"] is not None for v in views),
        has_curves=bool(run.metrics or run.steps),
    )


def write_report(run: RunData, out: str | Path, **kw: Any) -> Path:
    """Write :func:`build_report` to ``out`` atomically; returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(build_report(run, **kw), encoding="utf-8")
    tmp.replace(out)
    return out
