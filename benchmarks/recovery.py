"""Error recovery: does training with injected faults make the CPU default recover better?

Trains the CPU default (SmolLM2-135M-Instruct, the ``claw-grpo`` ``cpu`` preset: the cached SFT
warm-start on the reference solutions, then GRPO on the easy train tasks) twice from the same
warm-start — once on clean episodes (``cpu``), once with faults injected into a fraction of the task
groups (``faults``) — and evaluates the warm-start ("before") and both trained policies ("after") on
the same tasks (by default the claw ``heldout`` split, never trained on) with faults in every episode
(the recoverable kinds, one per episode, the same faults for every policy: a fixed eval seed). Prints, per policy: pass rate with faults, fault recovery rate
(fault met → task still solved), faults met, steps to recover, with the number of trials and Wilson
95 % intervals, and the after − before differences (Newcombe's 95 % interval) — the
baseline is the warm-start measured in the same run.

    python benchmarks/recovery.py        # 1 GRPO step each (2 tasks × 4), evals of 9 held-out tasks × 2 trials
    python benchmarks/recovery.py --steps 2 --tasks-per-step 4 --trials 3 --timeout-s 300   # the README's run

The default size fits ~20 min on a 2-core machine shared with other jobs, with the ``cpu`` preset's
warm-start cached (the first run of the preset builds it: add ~5-30 min). It is far too small to show
learning; the intervals say so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any


async def evaluate(forge: Any, tasks: list, trials: int, seed: int) -> dict[str, Any]:
    """Every task ``trials`` times with a fault in every episode (same faults for every policy)."""
    from openforge.faults.env import with_faults, without_faults
    from openforge.readings.recovery import fault_outcomes, is_faulty

    env = with_faults(without_faults(forge.env), {"fraction": 1.0, "per_episode": 1, "seed": seed})
    groups = await forge.runtime.groups(tasks, trials, min_group=1, environment=env, seed=seed, keep=False)
    trajs = [t for g in groups for t in g.trajectories]
    faulty = [t for t in trajs if is_faulty(t)]
    outs = [o for t in faulty for o in fault_outcomes(t)]
    met = [o for o in outs if o.met]
    steps = [o.steps_to_recover for o in met if o.steps_to_recover is not None]
    return {"trials": len(faulty), "passed": sum(t.status == "success" for t in faulty),
            "all_trials": len(trajs), "all_passed": sum(t.status == "success" for t in trajs),
            "faults": len(outs), "met": len(met), "recovered": sum(o.recovered for o in met),
            "steps_to_recover": sum(steps) / len(steps) if steps else None,
            "repeats": sum(o.repeats > 0 for o in met if o.met_step is not None),
            "discarded": len(groups.discarded)}


async def train_and_eval(preset: str, args: argparse.Namespace, *, with_before: bool) -> dict[str, Any]:
    from openforge.config import load_config
    from openforge.recipes import recipe_config
    from openforge.runner.forge import Forge, load_tasks
    from openforge.runner.teacher import warm_start

    overrides = [f"trainer.steps={args.steps}", "trainer.cpu.max_resample_rounds=1", "trainer.checkpoint_every=0",
                 f"rollout.tasks_per_step={args.tasks_per_step}", f"rollout.timeout_s={args.timeout_s}",
                 f"run_dir={args.out}/{preset}", f"seed={args.seed}", "eval.heldout.enabled=false"]
    if preset == "faults":
        overrides.append(f"env.options.faults.fraction={args.fraction}")
    cfg = load_config(recipe_config("claw-grpo"), preset=preset, overrides=overrides)
    out: dict[str, Any] = {"preset": preset, "split": args.split}
    async with Forge(cfg, progress=False) as forge:
        tasks = load_tasks(cfg, forge.env) if args.split == "train" else list(forge.env.tasks(args.split))
        eval_tasks = tasks[: args.max_tasks] if args.max_tasks else tasks
        if with_before:
            _say(f"{preset}: warm-start, then eval before training")
            t = time.monotonic()
            await warm_start(forge.runtime, cfg, list(forge.env.tasks(cfg.env.split)), model=forge.model,
                             tokenizer=forge.tokenizer, run_dir=forge.run_dir, log=_say)
            out["before"] = await evaluate(forge, eval_tasks, args.trials, args.eval_seed)
            out["before"]["s"] = time.monotonic() - t
        _say(f"{preset}: GRPO ({args.steps} step(s))")
        t = time.monotonic()
        summary = await forge.train()  # the same (cached) warm-start, then GRPO
        out["train_s"] = time.monotonic() - t
        out["train_rewards"] = [s.get("reward_mean") for s in summary.get("steps", [])]
        out["gradient_steps"] = sum(bool(s.get("gradient_step")) for s in summary.get("steps", []))
        _say(f"{preset}: eval after training")
        t = time.monotonic()
        out["after"] = await evaluate(forge, eval_tasks, args.trials, args.eval_seed)
        out["after"]["s"] = time.monotonic() - t
    return out


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _fmt(k: int, n: int) -> str:
    if not n:
        return "–"
    from openforge.analysis.ci import wilson_interval

    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.2f} [{lo:.2f}, {hi:.2f}]"


def _diff(a: dict[str, Any], b: dict[str, Any], kk: str, nk: str) -> str:
    from openforge.analysis.ci import diff_interval, verdict

    if not a[nk] or not b[nk]:
        return "–"
    d, lo, hi = diff_interval(a[kk], a[nk], b[kk], b[nk])
    return f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}] ({verdict(lo, hi)})"


def report(res: list[dict[str, Any]]) -> None:
    before = res[0]["before"]
    rows = [("warm-start (before)", before)] + [(f"after GRPO, {r['preset']} preset", r["after"]) for r in res]
    print(f"\nEval: the {res[0]['split']} tasks with a fault in every episode (same faults for every policy)")
    print(f"{'policy':32} {'pass rate with faults':28} {'fault recovery (met→solved)':28} {'met/injected':13} "
          f"{'steps to recover':17} repeats failing action")
    for name, r in rows:
        s = r["steps_to_recover"]
        print(f"{name:32} {_fmt(r['passed'], r['trials']):28} {_fmt(r['recovered'], r['met']):28} "
              f"{r['met']}/{r['faults']:<11} {('–' if s is None else f'{s:.1f}'):17} {r['repeats']}/{r['met']}")
    print("episodes (valid / with an armed fault / discarded as infra failures): " + "; ".join(
        f"{name} {r['all_trials']}/{r['trials']}/{r['discarded']}" for name, r in rows))
    print("\nafter − before (95 % interval):")
    for r in res:
        print(f"  {r['preset']:7} pass rate {_diff(before, r['after'], 'passed', 'trials')}; "
              f"recovery {_diff(before, r['after'], 'recovered', 'met')}; "
              f"GRPO rewards per step {r['train_rewards']}, gradient steps {r['gradient_steps']}, "
              f"train {r['train_s']:.0f}s, eval {r['after']['s']:.0f}s")
    if len(res) == 2:
        a, b = res[0]["after"], res[1]["after"]
        print(f"  faults − cpu (after): pass rate {_diff(a, b, 'passed', 'trials')}; "
              f"recovery {_diff(a, b, 'recovered', 'met')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1, help="GRPO steps per training run")
    ap.add_argument("--tasks-per-step", type=int, default=2, help="task groups (of 4 rollouts) per GRPO step")
    ap.add_argument("--trials", type=int, default=2, help="eval trials per task")
    ap.add_argument("--split", default="heldout",
                    help="eval tasks: a claw split (heldout: 9 variants of the trained skills, never trained on) "
                         "or `train` (the easy tasks the runs train on)")
    ap.add_argument("--max-tasks", type=int, default=0, help="eval the first N tasks of --split (0: all)")
    ap.add_argument("--fraction", type=float, default=0.5, help="faulty share of the training groups (faults preset)")
    ap.add_argument("--timeout-s", type=float, default=120, help="wall-clock budget per rollout (raise it on a loaded machine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-seed", type=int, default=1234)
    ap.add_argument("--out", default="runs/bench-recovery")
    args = ap.parse_args()
    t0 = time.monotonic()
    res = [asyncio.run(train_and_eval("cpu", args, with_before=True))]
    res.append(asyncio.run(train_and_eval("faults", args, with_before=False)))
    report(res)
    print(f"\ntotal {time.monotonic() - t0:.0f}s")
    out = Path(args.out) / "results.json"
    out.write_text(json.dumps({"args": vars(args), "results": res, "total_s": round(time.monotonic() - t0)}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
