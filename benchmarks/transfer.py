"""The transfer matrix (slow, not in CI): train the CPU default through react only, pi only and both,
then evaluate every resulting policy through react and through pi.

Rows are the training sets (plus ``untrained``: the model the runs start from, the baseline measured
in the same run); columns are (task set, eval harness). Each cell is successes / valid trials, the pass
rate with its Wilson 95 % interval, and its change against the untrained row with Newcombe's 95 %
interval ("within noise" when that holds 0). Task sets: the claw ``eval`` split (far beyond the CPU
default: notes/measured-2026-12.md) and the ``heldout`` split (new variants of the easy skills the CPU
default trains on; never trained on).

Every policy is trained by ``claw-grpo`` (``--preset``, default ``cpu``: the cached SFT warm-start,
then GRPO) in ``OUT/<train set>/`` — a run directory, so a rerun resumes instead of retraining — and
evaluated with its live weights at the recipe's sampling temperature, each harness with its recipe
option block. Writes ``OUT/matrix.json`` and ``OUT/matrix.md``.

    python benchmarks/transfer.py --out runs/transfer                 # the full matrix: hours on 2 cores
    python benchmarks/transfer.py --preset test --eval-splits heldout --eval-tasks 2 --trials 1 \\
        --out runs/transfer-smoke                                        # smoke size: ~10 min
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

TRAIN_SETS = {"react": "[react]", "pi": "[pi]", "react+pi": "[react, pi]"}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/transfer"))
    ap.add_argument("--preset", default="cpu", help="claw-grpo preset of the training runs")
    ap.add_argument("--train-sets", default="react,pi,react+pi", help=f"comma-separated, of {', '.join(TRAIN_SETS)}")
    ap.add_argument("--eval-harnesses", default="react,pi")
    ap.add_argument("--eval-splits", default="eval,heldout", help="claw splits to evaluate on")
    ap.add_argument("--eval-tasks", type=int, default=None, help="first N tasks of each split (default: all)")
    ap.add_argument("--trials", type=int, default=3, help="rollouts per task and eval harness")
    ap.add_argument("--split-trials", action="append", default=[], metavar="SPLIT=N",
                    help="trials for one split instead of --trials (repeatable), e.g. eval=1")
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the preset's)")
    ap.add_argument("--no-untrained", action="store_true", help="skip the untrained baseline row")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override of every training run (repeatable)")
    ap.add_argument("--speed", action="append", default=[], metavar="KEY=VALUE",
                    help=f"an override that changes only speed or memory ({', '.join(sorted(SPEED_KEYS))}): "
                         "not part of a row's settings, so rows saved without it are still reused")
    args = ap.parse_args()
    bad = [kv for kv in args.speed if kv.split("=", 1)[0] not in SPEED_KEYS]
    if bad:
        ap.error(f"--speed takes only {', '.join(sorted(SPEED_KEYS))} (got {', '.join(bad)}); use --set")
    return args


#: Settings that change how fast a step runs or how much memory it takes, never its result (gradient
#: accumulation over micro-batches and the shared-prefix path give the same gradients, up to rounding).
SPEED_KEYS = frozenset({"trainer.cpu.micro_batch_tokens", "trainer.cpu.share_prefix", "trainer.cpu.logprob_chunk"})


def _eval_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a row's numbers depend on besides its training run: a saved row is reused only if they match."""
    per_split = dict(kv.split("=", 1) for kv in args.split_trials)
    return {"harnesses": args.eval_harnesses, "eval_tasks": args.eval_tasks, "preset": args.preset,
            "steps": args.steps, "overrides": args.overrides,
            "trials": {s: int(per_split.get(s, args.trials)) for s in args.eval_splits.split(",") if s}}


def _saved_point(path: Path, harnesses: list[str], trials: int, tasks: list[Any]) -> dict[str, Any] | None:
    """The numbers of an evaluation an interrupted earlier run finished (after training, so of the same
    policy) with the same harnesses, trials and tasks; else None."""
    import yaml

    try:
        done = yaml.safe_load((path / "config.yaml").read_text())
        numbers = json.loads((path / "heldout.json").read_text())
    except (OSError, ValueError):
        return None
    if (done.get("harness"), done.get("trials"), done.get("tasks")) != (",".join(harnesses), trials,
                                                                       [t.id for t in tasks]):
        return None
    print(f"reusing {path}", flush=True)
    return numbers


async def _policy_row(name: str, overrides: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Train one policy (or resume its finished run) and evaluate it on every split × eval harness;
    a row saved by an earlier run with the same settings (``OUT/<name>/row.json``) is reused."""
    from openforge.harnesses.prompt_fit import check_prompt_fits
    from openforge.recipes import load_recipe_config
    from openforge.runner.forge import Forge
    from openforge.runner.heldout_eval import run_point

    run_dir = args.out / name
    settings = _eval_settings(args)
    saved = run_dir / "row.json"
    earlier = json.loads(saved.read_text()) if saved.is_file() else {}
    if earlier.get("settings") == settings:
        print(f"{name}: reusing {saved}", flush=True)
        return earlier
    cfg = load_recipe_config("claw-grpo", preset=args.preset, overrides=[
        *overrides, f"run_dir={run_dir}", "eval.heldout.enabled=false", *args.overrides, *args.speed])
    check_prompt_fits(cfg)
    harnesses = [h for h in args.eval_harnesses.split(",") if h]
    row: dict[str, Any] = {"train": name, "harness": cfg.harness.name, "settings": settings, "speed": args.speed,
                           "cells": {}}
    t0 = time.monotonic()
    async with Forge(cfg, progress=False) as forge:
        summary = await forge.train()
        row["train_time_s"] = round(time.monotonic() - t0, 1)
        row["steps"] = [{k: s.get(k) for k in ("step", "reward_mean", "pass_rate", "gradient_step", "per_harness")}
                        for s in summary.get("steps", [])]
        for split, trials in settings["trials"].items():
            tasks = list(forge.env.tasks(split))[: args.eval_tasks]
            path = run_dir / f"eval-{split}"
            res = _saved_point(path, harnesses, trials, tasks) or await run_point(
                forge, tasks, f"transfer-{split}", label=name, harnesses=harnesses, trials=trials, path=path)
            for h, m in res["per_harness"].items():
                row["cells"][f"{split}/{h}"] = m
    row["time_s"] = round(time.monotonic() - t0, 1)
    saved.write_text(json.dumps(row, indent=1))
    print(f"{name}: trained in {row['train_time_s']:.0f}s, evaluated in {row['time_s'] - row['train_time_s']:.0f}s: "
          + ", ".join(f"{k} {m['successes']}/{m['trials']}" for k, m in row["cells"].items()), flush=True)
    return row


def _cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
    from openforge.analysis.ci import diff_interval, verdict

    if not m.get("trials"):
        return "no valid trial"
    lo, hi = m["ci95"]
    text = f"{m['successes']}/{m['trials']} = {100 * m['pass_rate']:.0f} % [{100 * lo:.0f}–{100 * hi:.0f}]"
    if base and base.get("trials"):
        d, dlo, dhi = diff_interval(base["successes"], base["trials"], m["successes"], m["trials"])
        text += f"; {100 * d:+.0f} pts vs untrained ({verdict(dlo, dhi)})"
    return text


def _markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    cols = list(rows[0]["cells"]) if rows else []
    base = next((r for r in rows if r["train"] == "untrained"), None)
    lines = [f"| train set \\ eval (split/harness) | {' | '.join(cols)} |", "|---|" + "---|" * len(cols)]
    for r in rows:
        cells = [_cell(r["cells"][c], None if r is base or base is None else base["cells"].get(c)) for c in cols]
        lines.append(f"| {r['train']} | {' | '.join(cells)} |")
    lines.append("")
    lines.append(f"claw-grpo preset `{args.preset}`{f', {args.steps} GRPO steps' if args.steps is not None else ''}; "
                 f"trials per task and harness: {_eval_settings(args)['trials']}; "
                 f"{'all tasks' if args.eval_tasks is None else f'the first {args.eval_tasks} task(s)'} of each split; "
                 "successes/valid trials, Wilson 95 % CI; change vs the untrained model with Newcombe's 95 % CI.")
    return "\n".join(lines)


def main() -> None:
    args = _args()
    args.out.mkdir(parents=True, exist_ok=True)
    unknown = [s for s in args.train_sets.split(",") if s and s not in TRAIN_SETS]
    if unknown:
        raise SystemExit(f"--train-sets: unknown {', '.join(unknown)} (known: {', '.join(TRAIN_SETS)})")
    steps = [f"trainer.steps={args.steps}"] if args.steps is not None else []
    jobs = [] if args.no_untrained else [("untrained", ["harness.name=[react]", "sft.enabled=false", "trainer.steps=0"])]
    jobs += [(s, [f"harness.name={TRAIN_SETS[s]}", *steps]) for s in args.train_sets.split(",") if s]
    t0 = time.monotonic()
    rows = []
    for name, overrides in jobs:
        rows.append(asyncio.run(_policy_row(name, overrides, args)))
        (args.out / "matrix.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                          "rows": rows}, indent=1))
    table = _markdown(rows, args)
    (args.out / "matrix.md").write_text(table + "\n")
    print(table)
    print(f"total {time.monotonic() - t0:.0f}s · {args.out / 'matrix.json'}")


if __name__ == "__main__":
    main()
