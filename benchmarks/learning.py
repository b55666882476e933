"""The learning benchmark, second design (slow, not in CI): does GRPO in the harness make the agent
better on task instances it never saw, beyond its SFT warm-start, and beyond a control trained on the
same rollouts with shuffled rewards?

Runs the claw-grpo preset ``learn`` (the generated claw families, partial credit that pays only for
progress; :mod:`openforge.envs.claw.generated`) through the react harness. The code is in
``benchmarks/learning_v2/`` (design, calibrate, measure, arms, report). Subcommands:

``calibrate``: the SFT curve (the warm-start stopped after each ``--sft-steps``, measured on held-out
instances *beyond* the fixed set) picks the earliest checkpoint reaching half the curve's best; at that
checkpoint each family's train pass rate at the training temperature (``--tasks-per-family`` instances
× ``--group-size`` rollouts) keeps the families in 20–80 % and drops the others (a family is hardened
in its generator); a second pass checks the kept mix. Saved in ``OUT/calibration.json`` / ``.md``.

``run``: per seed, the warm-start point (``OUT/sft/seed<N>/``), then the arms ``grpo`` and ``control``
(``trainer.cpu.reward_shuffle=group``: each step's rewards permuted within its groups before the
advantages), each in ``OUT/<arm>/seed<N>/``: ``--episodes`` rollouts in groups of ``--group-size``,
with held-out points mid-run and at the end. One fixed held-out set (``--heldout`` instances ×
``--trials``, generator seed ``--heldout-seed``) for every seed and arm. Resumable: a rerun skips
what was measured and continues a run from its checkpoint, so the benchmark can span several sittings.
``OUT/design.json`` pins the scale: a later sitting with another scale is refused.

``report``: the effects over the warm-start (GRPO, control, GRPO − control), pooled over seeds with a
bootstrap over task instances crossed with seeds (:mod:`openforge.analysis.clustered`; the v1
per-trial interval next to it), per seed and per family, in ``OUT/learning-v2.json`` / ``.md``, the
curve as ``--png`` (``docs/img/learning-v2.png``), and with ``--json`` the summary in
``benchmarks/results/learning-v2-<date>.json``.

``all``: calibrate (unless saved), run, report. ``--smoke``: the whole pipeline at a tiny scale (1 seed,
2 steps of 2 tasks × 2 rollouts, 4 held-out instances × 1 trial, 2 families, no band): the pipeline,
not a verdict.

The defaults are the issue's design (3 seeds, group 8, ≥ 2,000 episodes a seed, 160 × 3 held-out): on
2 cores (~330 episodes an hour) that is 10+ hours per arm and seed. The engine and LoRA go through
``--set`` (``--set rollout.engine=vllm``, ``--set trainer.cpu.lora='{rank: 16, alpha: 32}'``) and are
recorded in the summary.

    python benchmarks/learning.py all --smoke --out runs/learning-v2-smoke --png runs/learning-v2-smoke/curve.png
    flock /tmp/openforge-heavy.lock python benchmarks/learning.py calibrate --out runs/learning-v2
    flock /tmp/openforge-heavy.lock python benchmarks/learning.py run --out runs/learning-v2     # many hours
    python benchmarks/learning.py report --out runs/learning-v2 --json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.learning_v2.design import Calibration, Design, config, engine_of, lora_of, with_scale  # noqa: E402

SCALE = {  # flag → (Design field, type, help)
    "--seeds": ("seeds", "ints", "training seeds (each a run per arm)"),
    "--episodes": ("episodes", int, "rollouts per seed and arm (steps = ceil(episodes / (group × tasks per step)))"),
    "--group-size": ("group_size", int, "rollouts per task in a GRPO group"),
    "--tasks-per-step": ("tasks_per_step", int, "task groups per GRPO step"),
    "--heldout": ("heldout", int, "held-out instances (the fixed set)"),
    "--trials": ("trials", int, "trials per held-out instance at each point"),
    "--heldout-seed": ("heldout_seed", int, "generator seed of the train and held-out streams (fixed over seeds)"),
    "--train-instances": ("train_instances", int, "train stream instances"),
    "--sft-steps": ("sft_steps", "ints", "calibration: the SFT curve's checkpoints (optimizer steps)"),
    "--val-instances": ("val_instances", int, "calibration: held-out instances beyond the fixed set"),
    "--val-trials": ("val_trials", int, "calibration: trials per validation instance"),
    "--tasks-per-family": ("tasks_per_family", int, "calibration: train instances per family"),
    "--families": ("families", "strs", "calibration: candidate families"),
    "--band": ("band", "floats", "calibration: the kept families' train pass-rate range, e.g. 0.2,0.8"),
}


def _parse(kind: object, text: str) -> object:
    if kind == "ints":
        return tuple(int(x) for x in text.split(",") if x.strip())
    if kind == "floats":
        return tuple(float(x) for x in text.split(",") if x.strip())
    if kind == "strs":
        return tuple(x.strip() for x in text.split(",") if x.strip())
    return kind(text)  # type: ignore[operator]


def _parser(kind: object) -> object:
    """``kind``'s parser, named for argparse's error ("invalid comma-separated ints value: 'a'")."""
    def parse(text: str) -> object:
        return _parse(kind, text)

    parse.__name__ = f"comma-separated {kind}" if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return parse


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=("calibrate", "run", "report", "all"))
    ap.add_argument("--out", type=Path, default=Path("runs/learning-v2"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override of every run and point (repeatable): engine, LoRA, ...")
    ap.add_argument("--smoke", action="store_true", help="the tiny end-to-end scale (flags still override it)")
    ap.add_argument("--png", type=Path, default=REPO / "docs" / "img" / "learning-v2.png")
    ap.add_argument("--json", nargs="?", const="default", default=None, metavar="PATH",
                    help="also write the summary to PATH (default benchmarks/results/learning-v2-<date>.json)")
    ap.add_argument("--draws", type=int, default=4000, help="bootstrap draws")
    for flag, (_, kind, text) in SCALE.items():
        ap.add_argument(flag, dest=flag[2:].replace("-", "_"), default=None, help=text, type=_parser(kind))
    args = ap.parse_args(argv)
    base = Design.smoke() if args.smoke else Design()
    try:
        args.design = with_scale(base, **{f: getattr(args, flag[2:].replace("-", "_")) for flag, (f, _, _) in SCALE.items()})
    except TypeError as e:
        ap.error(str(e))
    d = args.design
    if not d.seeds or not d.sft_steps or min(d.episodes, d.group_size, d.tasks_per_step, d.heldout, d.trials) < 1:
        ap.error("--seeds and --sft-steps need a value; episodes, group size, tasks per step, held-out and trials ≥ 1")
    if len(d.band) != 2 or not 0 <= d.band[0] <= d.band[1] <= 1:
        ap.error(f"--band needs two rates 0 ≤ low ≤ high ≤ 1, got {d.band}")
    if d.group_size < 2:
        ap.error("--group-size must be ≥ 2: a GRPO group of one rollout has no baseline")
    args.out = args.out.resolve()
    return args


def pin_design(out: Path, design: Design) -> None:
    """Write ``OUT/design.json`` the first time; refuse a later sitting whose scale differs (its points
    would not pair with the earlier ones)."""
    f = out / "design.json"
    now = json.loads(json.dumps(design.as_json()))
    if f.is_file():
        was = json.loads(f.read_text())
        diff = sorted(k for k in now if was.get(k) != now[k])
        if diff:
            raise SystemExit(f"{f}: this benchmark was started with another scale ({', '.join(diff)} differ: "
                             f"{[(k, was.get(k), now[k]) for k in diff]}); use the same flags or another --out")
        return
    out.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(now, indent=1))


async def main(argv: list[str] | None = None) -> dict | None:
    from benchmarks.learning_v2 import arms, calibrate, report

    args = _args(argv)
    design, out = args.design, args.out
    if args.cmd in ("calibrate", "run", "all"):
        pin_design(out, design)
    if args.cmd == "calibrate" or (args.cmd == "all" and not (out / "calibration.json").is_file()):
        await calibrate.calibrate(design, out, args.overrides)
    if args.cmd == "calibrate":
        return None
    cal = Calibration.load(out)
    if args.cmd in ("run", "all"):
        for seed in design.seeds:
            await arms.run_seed(design, cal, out, seed, args.overrides)
    cfg = config(design, seed=design.seeds[0], families=cal.families, overrides=args.overrides, extra=[])
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    summary = report.summarize(out, design, calibration={"sft_steps": cal.sft_steps, "families": list(cal.families),
                                                         **cal.details},
                               engine=engine_of(cfg), lora=lora_of(cfg), date=date, draws=args.draws,
                               command="python benchmarks/learning.py " + shlex.join(argv or sys.argv[1:]))
    (out / "learning-v2.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "learning-v2.md").write_text(report.report_md(summary))
    report.plot(summary, args.png)
    if args.json:
        dest = REPO / "benchmarks" / "results" / f"learning-v2-{date}.json" if args.json == "default" else Path(args.json)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(summary, indent=1, default=str))
    print(report.report_md(summary))
    return summary


if __name__ == "__main__":
    asyncio.run(main())
