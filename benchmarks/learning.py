"""The learning benchmark (slow, not in CI): does GRPO in the harness make the agent better on tasks it
never saw, beyond what the SFT warm-start did?

Runs the claw-grpo preset ``learn`` (the generated claw family: a train stream and a disjoint held-out
stream from the same generators, partial credit; :mod:`openforge.envs.claw.generated`) through the
react harness. Three subcommands:

``calibrate``: the SFT warm-start on the train stream's reference solutions (cached, the same one the
run uses), then ``--tasks-per-family`` train instances of every family, ``rollout.group_size``
rollouts each at the recipe's temperature: per family the success rate, mean reward and the share of
GRPO groups that are mixed (rewards differ: a gradient) and mixed by success. Writes
``OUT/calibration.json`` and ``OUT/calibration.md``. The target is 20–60 % of groups mixed.

``run``: per seed (``--seeds``), ``openforge.run`` of the preset in ``OUT/seed<N>/`` (seed and generated
streams both follow the seed), trained in segments that end at each ``--checkpoints`` step: the first
segment measures the three held-out points' first two (untrained, SFT warm-start) and the held-out
point at its end; each later segment resumes the run and its final checkpoint is evaluated on the
same held-out instances (``OUT/seed<N>/curve/step-<K>/``). Everything written is reused: a rerun
continues where it stopped (training resumes from the run's checkpoint; a measured point is not
measured again).

``report``: the three-point table per seed (untrained, warm-start, final; GRPO's own effect final −
warm-start with its paired 95 % interval next to SFT's), the learning curve (train reward, pass rate,
mixed-group rate, trained tokens per step; held-out pass rate at the checkpoints) as
``docs/img/learning.png`` (``--png``), and the numbers in ``OUT/learning.json`` / ``OUT/learning.md``.
``run`` ends with it. ``--with OUT0/learning.json`` adds an earlier report's seeds (e.g. a seed run
elsewhere, whose run directory is gone) to the table and the curve.

    flock /tmp/openforge-heavy.lock python benchmarks/learning.py calibrate --out runs/learning
    flock /tmp/openforge-heavy.lock python benchmarks/learning.py run --out runs/learning   # hours
    python benchmarks/learning.py run --out runs/learning-smoke --seeds 0 --checkpoints 1,2 \\
        --set env.options.generated.heldout=4 --set eval.heldout.trials=1 --png runs/learning-smoke/learning.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RECIPE, PRESET = "claw-grpo", "learn"


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("calibrate", "run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=Path("runs/learning"))
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="config override of every run (repeatable)")
        p.add_argument("--png", type=Path, default=REPO / "docs" / "img" / "learning.png")
        if name == "calibrate":
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--tasks-per-family", type=int, default=2)
        else:
            p.add_argument("--seeds", default="0,1", help="comma-separated seeds (runs and generated streams)")
            p.add_argument("--checkpoints", default="5,10,20",
                           help="GRPO steps at which the held-out set is measured; the last is the run's length")
            p.add_argument("--with", dest="earlier", type=Path, action="append", default=[], metavar="JSON",
                           help="an earlier report's learning.json: its seeds with no run directory in --out join "
                                "the report (their numbers as reported)")
    args = ap.parse_args(argv)
    if args.cmd != "calibrate":
        args.seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
        args.checkpoints = sorted({int(c) for c in str(args.checkpoints).split(",") if c.strip()})
        if not args.seeds or not args.checkpoints or args.checkpoints[0] < 1:
            ap.error("--seeds and --checkpoints need at least one value; checkpoints are steps ≥ 1")
    return args


def _config(run_dir: Path, seed: int, overrides: list[str], *extra: str) -> Any:
    from openforge.config import load_config
    from openforge.recipes import recipe_config

    return load_config(recipe_config(RECIPE), preset=PRESET, overrides=[
        f"run_dir={run_dir}", f"seed={seed}", f"env.options.generated.seed={seed}", *overrides, *extra])


# ------------------------------------------------------------------------------------ calibrate


def family_numbers(groups: list[Any], family: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per family (task category): rollouts, successes, success rate, mean reward, groups, mixed groups
    (rewards differ: GRPO has a gradient) and mixed by success (some succeed, some do not)."""
    from openforge.train.grpo import count_mixed_groups

    out: dict[str, dict[str, Any]] = {}
    for fam in sorted({family[g.task_id] for g in groups}):
        gs = [g for g in groups if family[g.task_id] == fam]
        trajs = [t for g in gs for t in g.trainable]
        wins = sum(t.status.value == "success" for t in trajs)
        by_success = sum(1 for g in gs if len({t.status.value == "success" for t in g.trainable}) > 1)
        mixed = count_mixed_groups(gs)
        out[fam] = {"rollouts": len(trajs), "successes": wins, "success_rate": round(wins / len(trajs), 3) if trajs else None,
                    "reward_mean": round(sum(t.reward for t in trajs) / len(trajs), 3) if trajs else None,
                    "groups": len(gs), "mixed_groups": mixed, "mixed_rate": round(mixed / len(gs), 3),
                    "mixed_by_success": by_success}
    return out


async def calibrate(args: argparse.Namespace) -> dict[str, Any]:
    from openforge.forge import Forge, load_tasks
    from openforge.teacher import warm_start

    cfg = _config(args.out / f"calibrate-seed{args.seed}", args.seed, args.overrides)
    async with Forge(cfg, progress=False) as forge:
        train = load_tasks(cfg, forge.env)
        sft = await warm_start(forge.runtime, cfg, list(forge.env.tasks(cfg.env.split)), model=forge.model,
                               tokenizer=forge.tokenizer, run_dir=forge.run_dir, log=forge.console.log)
        pick: list[Any] = []
        for fam in dict.fromkeys(t.category for t in train):
            pick += [t for t in train if t.category == fam][: args.tasks_per_family]
        forge.console.log(f"calibration: {len(pick)} train instances × {cfg.rollout.group_size} rollouts "
                          f"at temperature {cfg.rollout.temperature}")
        groups = await forge.rollouts(pick, cfg.rollout.group_size)
    fams = family_numbers(list(groups), {t.id: t.category for t in pick})
    total = {k: sum(f[k] for f in fams.values()) for k in ("rollouts", "successes", "groups", "mixed_groups",
                                                            "mixed_by_success")}
    total["success_rate"] = round(total["successes"] / total["rollouts"], 3) if total["rollouts"] else None
    total["mixed_rate"] = round(total["mixed_groups"] / total["groups"], 3) if total["groups"] else None
    result = {"seed": args.seed, "group_size": cfg.rollout.group_size, "temperature": cfg.rollout.temperature,
              "harness": cfg.harness.as_run(), "sft": {k: sft.get(k) for k in ("key", "cached", "samples", "time_s")},
              "discarded": len(groups.discarded), "families": fams, "all": total}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "calibration.md").write_text(calibration_md(result))
    print(calibration_md(result))
    return result


def calibration_md(r: dict[str, Any]) -> str:
    rows = ["| family | success | mean reward | mixed groups | mixed by success |", "|---|---|---|---|---|"]
    for fam, f in [*r["families"].items(), ("**all**", {**r["all"], "reward_mean": None})]:
        rate = f"{f['successes']}/{f['rollouts']} = {100 * (f['success_rate'] or 0):.0f} %"
        mean = "" if f.get("reward_mean") is None else f"{f['reward_mean']:.2f}"
        rows.append(f"| {fam} | {rate} | {mean} | {f['mixed_groups']}/{f['groups']} = {100 * (f['mixed_rate'] or 0):.0f} % "
                    f"| {f['mixed_by_success']}/{f['groups']} |")
    return (f"Calibration (seed {r['seed']}, SFT warm-start, {r['group_size']} rollouts per instance at temperature "
            f"{r['temperature']}; {r['discarded']} rollouts lost to infrastructure)\n\n" + "\n".join(rows) + "\n")


# ------------------------------------------------------------------------------------ run


def _latest_checkpoint(run_dir: Path) -> Path | None:
    index = run_dir / "checkpoints" / "index.json"
    try:
        latest = json.loads(index.read_text()).get("latest")
    except (OSError, ValueError):
        return None
    return run_dir / "checkpoints" / latest if latest and (run_dir / "checkpoints" / latest).is_dir() else None


def _steps_done(run_dir: Path) -> int:
    try:
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except OSError:
        return 0
    return max([int(x["step"]) for x in lines if "reward_mean" in x] or [0])


async def eval_checkpoint(args: argparse.Namespace, seed: int, ck: Path, step: int) -> dict[str, Any]:
    """The held-out point of checkpoint ``ck`` (GRPO step ``step``): the run's held-out instances, trials
    and harnesses, the checkpoint's weights served as the policy."""
    from openforge.analysis.heldout import check_heldout
    from openforge.forge import Forge, load_tasks
    from openforge.heldout_eval import run_point

    dest = args.out / f"seed{seed}" / "curve" / f"step-{step}"
    cfg = _config(dest / "run", seed, args.overrides, f"model.name={ck}", "sft.enabled=false")
    async with Forge(cfg, progress=False) as forge:
        held = check_heldout(cfg, forge.env, load_tasks(cfg, forge.env))
        return await run_point(forge, held, f"step-{step}", label=f"step {step}", path=dest)


async def run_seed(args: argparse.Namespace, seed: int) -> None:
    import openforge

    run_dir = args.out / f"seed{seed}"
    for step in args.checkpoints:
        point = run_dir / "curve" / f"step-{step}" / "heldout.json"
        if point.is_file():
            continue
        fresh = _steps_done(run_dir) == 0 and not (run_dir / "heldout" / "after").exists()
        if _steps_done(run_dir) < step:
            await asyncio.to_thread(openforge.run, recipe=RECIPE, preset=PRESET, progress=False, overrides=[
                f"run_dir={run_dir}", f"seed={seed}", f"env.options.generated.seed={seed}", *args.overrides,
                f"trainer.steps={step}"])
        after = run_dir / "heldout" / "after"
        if fresh and (after / "heldout.json").is_file():  # the first segment measured its end itself
            point.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(after, point.parent, dirs_exist_ok=True)
            continue
        ck = _latest_checkpoint(run_dir)
        if ck is None or _steps_done(run_dir) < step:
            raise SystemExit(f"seed {seed}: no checkpoint at step {step} in {run_dir} (did the run fail?)")
        await eval_checkpoint(args, seed, ck, step)


# ------------------------------------------------------------------------------------ report


def seed_numbers(run_dir: Path) -> dict[str, Any]:
    """One seed's three points, its comparisons and its curve, from what ``run`` wrote."""
    from openforge.analysis.heldout import load_point, shares

    def point(p: Path) -> dict[str, Any] | None:
        try:
            return json.loads((p / "heldout.json").read_text())
        except (OSError, ValueError):
            return None

    curve = {int(p.name.split("-")[1]): point(p) for p in sorted((run_dir / "curve").glob("step-*"))}
    curve = {k: v for k, v in sorted(curve.items()) if v}
    held = {"before": load_point(run_dir, "before"), "warmstart": load_point(run_dir, "warmstart"),
            "after": curve[max(curve)] if curve else None}
    out: dict[str, Any] = {"points": {k: _rate(v) for k, v in held.items()}}
    if all(held.values()):
        out.update(shares(held))  # sft, grpo, total: per harness, paired
    out["heldout_curve"] = {0: _rate(held["warmstart"]), **{k: _rate(v) for k, v in curve.items()}}
    out["families"] = by_family({"untrained": held["before"], "warm-start": held["warmstart"],
                                 **{f"step {k}": v for k, v in curve.items()}})
    try:
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except OSError:
        lines = []
    out["steps"] = [{"step": x["step"], "reward_mean": x["reward_mean"], "pass_rate": x["pass_rate"],
                     "mixed_rate": round(x["mixed_groups"] / x["groups"], 3) if x.get("groups") else None,
                     "trained_tokens": x.get("train/trained_tokens", 0), "step_time_s": x.get("step_time_s")}
                    for x in lines if "reward_mean" in x]
    out["_held"] = held
    return out


def by_family(points: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, list[int]]]:
    """Held-out successes and trials per family (``gen-<family>-<digest>`` task ids) at each point.

    >>> by_family({"a": {"per_harness": {"react": {"outcomes": {"gen-git-tag-1a": [1, 0], "gen-git-tag-2b": [1, 1]}}}}})
    {'git-tag': {'a': [3, 4]}}
    """
    out: dict[str, dict[str, list[int]]] = {}
    for name, p in points.items():
        if not p:
            continue
        for task, wins in (_react(p).get("outcomes") or {}).items():
            fam = task.removeprefix("gen-").rsplit("-", 1)[0]
            cell = out.setdefault(fam, {}).setdefault(name, [0, 0])
            cell[0] += sum(wins)
            cell[1] += len(wins)
    return dict(sorted(out.items()))


def _react_of(per_harness: dict[str, Any]) -> Any:
    """The entry for react in a per-harness mapping (else its first harness's; None when empty)."""
    return per_harness.get("react") or next(iter(per_harness.values()), None)


def _react(p: dict[str, Any]) -> dict[str, Any]:
    """A held-out point's numbers through react (else its first harness)."""
    return _react_of(p["per_harness"])


def _rate(p: dict[str, Any] | None) -> dict[str, Any] | None:
    if not p:
        return None
    n = _react(p)
    return {k: n.get(k) for k in ("successes", "trials", "pass_rate", "ci95", "infra_failures")}


def report(args: argparse.Namespace) -> dict[str, Any]:
    seeds = {s: seed_numbers(args.out / f"seed{s}") for s in args.seeds if (args.out / f"seed{s}").is_dir()}
    for path in args.earlier:
        for s, n in json.loads(path.read_text()).items():
            seeds.setdefault(int(s), n)
    seeds = dict(sorted(seeds.items()))
    md = ["# Learning benchmark (claw-grpo preset `learn`, react)", ""]
    for s, n in seeds.items():
        _print_table(s, n.pop("_held", None))
        md += seed_md(s, n)
    for who in ("sft", "grpo"):
        both = [d for n in seeds.values() if (d := _react_share(n, who))]
        if len(both) > 1:
            d, lo, hi = pooled(both)
            md.append(f"{who.upper()}'s own effect pooled over {len(both)} seeds (inverse-variance weights, each "
                      f"seed's standard error read off its 95 % interval): {100 * d:+.1f} pts "
                      f"[{100 * lo:+.1f}, {100 * hi:+.1f}]")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "learning.json").write_text(json.dumps(seeds, indent=1, default=str))
    (args.out / "learning.md").write_text("\n".join(md) + "\n")
    plot(seeds, args.png)
    print("\n".join(md))
    return seeds


def _react_share(n: dict[str, Any], who: str) -> dict[str, Any] | None:
    """A seed's ``sft`` or ``grpo`` comparison through react (else its first harness)."""
    return _react_of(n.get(who) or {})


def pooled(effects: list[dict[str, Any]]) -> tuple[float, float, float]:
    """A fixed-effect estimate over seeds: each seed's ``delta`` weighted by ``1 / se²``, ``se`` its 95 %
    interval's width / (2 × 1.96) (a normal approximation of the seeds' paired Newcombe intervals).

    >>> d, lo, hi = pooled([{"delta": 0.1, "ci95": [-0.1, 0.3]}, {"delta": 0.1, "ci95": [-0.1, 0.3]}])
    >>> round(d, 3), round(lo, 3), round(hi, 3)  # two equal seeds: same centre, interval √2 narrower
    (0.1, -0.041, 0.241)
    """
    from openforge.analysis.ci import Z95

    w = [(2 * Z95 / (e["ci95"][1] - e["ci95"][0])) ** 2 for e in effects]
    d = sum(wi * e["delta"] for wi, e in zip(w, effects)) / sum(w)
    se = sum(w) ** -0.5
    return d, d - Z95 * se, d + Z95 * se


def _print_table(seed: int, held: dict[str, Any] | None) -> None:
    """The console's three-point table of a seed measured in this ``--out`` (an earlier report's seeds
    carry only their numbers)."""
    from openforge.analysis.heldout import heldout_table
    from openforge.console import new_console

    if not held or not all(held.values()):
        return
    console = new_console(stderr=False)
    console.print(f"[bold]seed {seed}[/]")
    tasks = sorted({t for n in held["after"]["per_harness"].values() for t in n.get("outcomes", {})})
    table = heldout_table({"before": held["before"], "warmstart": held["warmstart"], "after": held["after"],
                           "tasks": tasks, "trials": next(iter(held["after"]["per_harness"].values())).get("k")})
    if table is not None:
        console.print(table)


def seed_md(seed: int, n: dict[str, Any]) -> list[str]:
    """One seed's section of ``learning.md``: the three points, SFT's and GRPO's own effects, the steps,
    the held-out curve and the per-family successes."""
    md = [f"## seed {seed}", "", "| point | held-out success |", "|---|---|"]
    md += [f"| {k} | {_fmt(v)} |" for k, v in n["points"].items()]
    for who in ("sft", "grpo"):
        d = _react_share(n, who)
        if d:
            md.append(f"\n{who.upper()}'s own effect: {_diff(d)}")
    md += ["", "| step | train reward | train pass | mixed groups | trained tokens |", "|---|---|---|---|---|"]
    md += [f"| {x['step']} | {x['reward_mean']:.3f} | {x['pass_rate']:.2f} | {x['mixed_rate']} | "
           f"{int(x['trained_tokens'])} |" for x in n["steps"]]
    md += ["", "held-out by step: " + ", ".join(f"{k}: {_fmt(v)}" for k, v in n["heldout_curve"].items()), ""]
    cols = list(dict.fromkeys(c for f in n["families"].values() for c in f))
    if cols:
        md += ["held-out successes per family:", "", "| family | " + " | ".join(cols) + " |",
               "|---" * (len(cols) + 1) + "|"]
        md += [f"| {fam} | " + " | ".join(f"{f[c][0]}/{f[c][1]}" if c in f else "—" for c in cols) + " |"
               for fam, f in n["families"].items()]
        md.append("")
    return md


def _fmt(v: dict[str, Any] | None) -> str:
    if not v:
        return "—"
    ci = v.get("ci95") or [None, None]
    tail = f" [{100 * ci[0]:.0f}–{100 * ci[1]:.0f}]" if ci[0] is not None else ""
    return f"{v['successes']}/{v['trials']} = {100 * (v['pass_rate'] or 0):.0f} %{tail}"


def _diff(d: dict[str, Any]) -> str:
    lo, hi = d.get("ci95") or (None, None)
    ci = f" [{100 * lo:+.0f}, {100 * hi:+.0f}]" if lo is not None else ""
    return f"{100 * d.get('delta', 0):+.0f} pts{ci} ({d.get('verdict', '?')}{', paired' if d.get('paired') else ''})"


def plot(seeds: dict[int, dict[str, Any]], png: Path) -> None:
    """Four panels (train reward and pass rate; mixed-group rate; trained tokens; held-out pass rate by
    step), one line per seed, drawn with Pillow."""
    from PIL import Image, ImageDraw

    panels = [("train reward (mean)", lambda n: [(x["step"], x["reward_mean"]) for x in n["steps"]], (0, 1)),
              ("mixed groups (share)", lambda n: [(x["step"], x["mixed_rate"] or 0) for x in n["steps"]], (0, 1)),
              ("trained tokens per step", lambda n: [(x["step"], x["trained_tokens"]) for x in n["steps"]], None),
              ("held-out pass rate", lambda n: [(int(k), v["pass_rate"] or 0) for k, v in n["heldout_curve"].items() if v],
               (0, 1))]
    colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"]
    w, h, pad = 460, 300, 46
    img = Image.new("RGB", (2 * w, 2 * h), "white")
    d = ImageDraw.Draw(img)
    steps = max([x["step"] for n in seeds.values() for x in n["steps"]] or [1])
    for i, (title, get, yr) in enumerate(panels):
        ox, oy = (i % 2) * w, (i // 2) * h
        series = {s: get(n) for s, n in seeds.items()}
        ys = [y for pts in series.values() for _, y in pts]
        lo, hi = yr or (0.0, max(ys or [1.0]) or 1.0)
        x0, y0, x1, y1 = ox + pad, oy + 28, ox + w - 14, oy + h - pad

        def at(x: float, y: float, lo: float = lo, hi: float = hi, x0: int = x0, y0: int = y0, x1: int = x1,
               y1: int = y1) -> tuple[float, float]:
            return x0 + (x1 - x0) * x / steps, y1 - (y1 - y0) * (y - lo) / ((hi - lo) or 1)

        d.text((ox + pad, oy + 8), title, fill="black")
        d.rectangle([x0, y0, x1, y1], outline="#9ca3af")
        for frac in (0, 0.5, 1):
            yv = lo + frac * (hi - lo)
            d.text((ox + 4, at(0, yv)[1] - 6), f"{yv:.3g}", fill="#4b5563")
        for xv in sorted({0, steps // 2, steps}):
            d.text((at(xv, lo)[0] - 4, y1 + 4), str(xv), fill="#4b5563")
        d.text(((x0 + x1) // 2 - 14, y1 + 20), "GRPO step", fill="#4b5563")
        for j, (s, pts) in enumerate(series.items()):
            c = colors[j % len(colors)]
            xy = [at(x, y) for x, y in sorted(pts)]
            if len(xy) > 1:
                d.line(xy, fill=c, width=2)
            for px, py in xy:
                d.ellipse([px - 3, py - 3, px + 3, py + 3], fill=c)
            d.text((x1 - 60, y0 + 4 + 14 * j), f"seed {s}", fill=c)
    png.parent.mkdir(parents=True, exist_ok=True)
    img.save(png)


async def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    if args.cmd == "calibrate":
        await calibrate(args)
        return
    if args.cmd == "run":
        for seed in args.seeds:
            await run_seed(args, seed)
    report(args)


if __name__ == "__main__":
    asyncio.run(main())
