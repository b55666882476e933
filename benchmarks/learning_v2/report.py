"""The report: effects with intervals that respect the design, per family, as JSON, markdown and PNG.

Owns: :func:`collect` (every measured held-out point under ``OUT``: per arm, seed and step, each
instance's trial outcomes), :func:`summarize` (the JSON summary), :func:`report_md` and :func:`plot`.

The effects are those of the end point against the seed's warm-start (``sft``), on the same instances:
``grpo`` (GRPO's own effect) and ``control`` (the shuffled-reward arm's: it must show none), plus
``grpo_vs_control``. Each is pooled over the seeds with :func:`openforge.analysis.clustered.crossed_bootstrap`
(instances crossed with seeds; per seed: instances only), in percentage points with a 95 % percentile
interval. The v1 interval (paired Newcombe per trial) is reported next to it as ``naive_grpo``, to show
how much narrower it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openforge.analysis.clustered import Interval, crossed_bootstrap, differences, naive_trial_interval

from .arms import episodes_of, steps_done
from .design import ARMS, Design, point_dir, run_dir
from .measure import family_of

Outcomes = dict[str, list[int]]


def _outcomes(path: Path) -> Outcomes | None:
    try:
        point = json.loads((path / "heldout.json").read_text())
    except (OSError, ValueError):
        return None
    per = point.get("per_harness") or {}
    n = per.get("react") or next(iter(per.values()), None) or {}
    return {k: [int(bool(x)) for x in v] for k, v in (n.get("outcomes") or {}).items()} or None


def collect(out: Path, design: Design) -> dict[str, dict[int, dict[int, Outcomes]]]:
    """``{arm: {seed: {step: outcomes}}}``; ``sft`` at step 0 (the warm-start), the arms at their points."""
    data: dict[str, dict[int, dict[int, Outcomes]]] = {"sft": {}, **{a: {} for a in ARMS}}
    for seed in design.seeds:
        if (o := _outcomes(point_dir(out, "sft", seed, 0))) is not None:
            data["sft"][seed] = {0: o}
        for arm in ARMS:
            for step in design.points:
                if (o := _outcomes(point_dir(out, arm, seed, step))) is not None:
                    data[arm].setdefault(seed, {})[step] = o
    return data


def _pts(iv: Interval) -> dict[str, Any]:
    """An interval in percentage points (effect, lo, hi, se) with what it was computed over."""
    return {"effect": round(100 * iv.effect, 1), "lo": round(100 * iv.lo, 1), "hi": round(100 * iv.hi, 1),
            "se": round(100 * iv.se, 2), "instances": iv.instances, "seeds": iv.seeds, "method": iv.method,
            # every pair's difference equal (e.g. nothing solved anywhere): the bootstrap sees no spread, so
            # its zero-width interval says nothing about the uncertainty
            "degenerate": iv.lo == iv.hi}


def _effect(arm: dict[int, Outcomes], base: dict[int, Outcomes], draws: int,
            only: set[str] | None = None) -> dict[str, Any] | None:
    """``arm − base`` per seed and instance (restricted to ``only``), pooled with the crossed bootstrap."""
    seeds = [s for s in arm if s in base]
    if not seeds:
        return None
    pick = {s: {i: o for i, o in arm[s].items() if only is None or i in only} for s in seeds}
    try:
        _, _, d = differences(pick, {s: base[s] for s in seeds}, shared_base=False)
    except ValueError:
        return None
    if len(d[0]) < 2:
        return None
    return _pts(crossed_bootstrap(d, draws=draws))


def _ends(data: dict[str, Any], arm: str, end: int) -> dict[int, Outcomes]:
    return {s: pts[end] for s, pts in data[arm].items() if end in pts}


def _rate(o: Outcomes | None) -> dict[str, Any] | None:
    if not o:
        return None
    c, n = sum(map(sum, o.values())), sum(map(len, o.values()))
    return {"successes": c, "trials": n, "pass_rate": round(c / n, 4) if n else None}


def _ledger(path: Path) -> float:
    try:
        return float(json.loads((path / "bench.json").read_text())["wall_s"])
    except (OSError, ValueError, KeyError):
        return 0.0


def seed_rows(out: Path, design: Design, data: dict[str, Any], draws: int) -> list[dict[str, Any]]:
    end, sft = design.steps, {s: p[0] for s, p in data["sft"].items()}
    rows = []
    for seed in design.seeds:
        arms = {a: {"episodes": episodes_of(run_dir(out, a, seed)), "steps": steps_done(run_dir(out, a, seed)),
                    "wall_s": _ledger(run_dir(out, a, seed))} for a in ARMS}
        row: dict[str, Any] = {
            "seed": seed, "episodes": arms["grpo"]["episodes"],
            "wall_s": round(sum(a["wall_s"] for a in arms.values()) + _ledger(point_dir(out, "sft", seed, 0)), 1),
            "arms": arms, "points": {"sft": _rate(sft.get(seed)),
                                     **{a: {k: _rate(v) for k, v in data[a].get(seed, {}).items()} for a in ARMS}}}
        for a in ARMS:
            ends = _ends(data, a, end)
            row[a] = _effect({seed: ends[seed]}, sft, draws) if seed in ends else None
        keys = {"sft": _sft_key_of_point(point_dir(out, "sft", seed, 0)),
                **{a: _sft_key_of_run(run_dir(out, a, seed)) for a in ARMS}}
        row["warm_start_keys"] = keys  # the SFT point and both arms must start from the same warm-start
        row["warm_start_same"] = len({k for k in keys.values() if k}) <= 1
        rows.append(row)
    return rows


def _sft_key_of_point(path: Path) -> str | None:
    try:
        return (json.loads((path / "heldout.json").read_text()).get("sft") or {}).get("key")
    except (OSError, ValueError):
        return None


def _sft_key_of_run(rdir: Path) -> str | None:
    """The warm-start key a GRPO run started from (noted in its ``bench.json`` by the segment that ran it)."""
    try:
        return json.loads((rdir / "bench.json").read_text()).get("warm_start_key")
    except (OSError, ValueError):
        return None


def families(design: Design, data: dict[str, Any], draws: int) -> dict[str, dict[str, Any]]:
    """Per family: pooled successes/trials of the warm-start and each arm's end, and each arm's effect."""
    end, sft = design.steps, {s: p[0] for s, p in data["sft"].items()}
    ends = {a: _ends(data, a, end) for a in ARMS}
    fams = sorted({family_of(i) for o in sft.values() for i in o})
    out: dict[str, dict[str, Any]] = {}
    for fam in fams:
        only = {i for o in sft.values() for i in o if family_of(i) == fam}
        row: dict[str, Any] = {"instances": len(only)}
        for name, pts in (("sft", sft), *ends.items()):
            cells = [x for o in pts.values() for i, v in o.items() if i in only for x in v]
            row[name] = [sum(cells), len(cells)]
        for a in ARMS:
            row[f"{a}_effect"] = _effect(ends[a], sft, draws, only)
        out[fam] = row
    return out


def summarize(out: Path, design: Design, *, calibration: dict[str, Any], engine: str, lora: Any, command: str,
              date: str, draws: int = 4000) -> dict[str, Any]:
    """The benchmark's JSON summary (see the module docstring); effects in percentage points, 95 %."""
    data = collect(out, design)
    end, sft = design.steps, {s: p[0] for s, p in data["sft"].items()}
    ends = {a: _ends(data, a, end) for a in ARMS}
    instances = sorted({i for o in sft.values() for i in o})
    pooled: dict[str, Any] = {a: _effect(ends[a], sft, draws) for a in ARMS}
    pooled["grpo_vs_control"] = _effect(ends["grpo"], ends["control"], draws)
    both = [s for s in ends["grpo"] if s in sft]
    if both:
        pooled["naive_grpo"] = _pts(naive_trial_interval({s: ends["grpo"][s] for s in both}, sft, shared_base=False))
    curve = {a: {s: {k: _rate(v)["pass_rate"] for k, v in sorted({0: sft[s], **pts}.items())}
                 for s, pts in data[a].items() if s in sft} for a in ARMS}
    train = {a: {s: [{"step": x["step"], "reward_mean": x["reward_mean"], "pass_rate": x["pass_rate"]}
                     for x in _steps(run_dir(out, a, s))] for s in design.seeds} for a in ARMS}
    return {"benchmark": "learning-v2", "date": date, "command": command, "design": design.as_json(),
            "calibration": calibration, "engine": engine, "lora": lora, "unit": "percentage points, 95 % interval",
            "heldout_instances": len(instances), "heldout_trials": design.trials,
            "heldout_pairs": sum(min(len(o[i]), design.trials) for o in list(sft.values())[:1] for i in o),
            "seeds": seed_rows(out, design, data, draws), "pooled": pooled,
            "families": families(design, data, draws), "curve": curve, "train": train}


def _steps(rdir: Path) -> list[dict[str, Any]]:
    try:
        lines = [json.loads(x) for x in (rdir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except OSError:
        return []
    return list({int(x["step"]): x for x in lines if "reward_mean" in x}.values())


def _iv(e: dict[str, Any] | None) -> str:
    if not e:
        return "—"
    flag = " (no spread: every instance's difference equal)" if e.get("degenerate") else ""
    return f"{e['effect']:+.1f} pts [{e['lo']:+.1f}, {e['hi']:+.1f}]{flag}"


def report_md(s: dict[str, Any]) -> str:
    """The markdown of a summary: pooled effects, seeds, families."""
    p = s["pooled"]
    md = [f"# Learning benchmark v2 ({s['date']}; engine {s['engine']}, LoRA {'on' if s['lora'] else 'off'})", "",
          f"`{s['command']}`", "",
          f"Held-out set: {s['heldout_instances']} instances × {s['heldout_trials']} trial(s) "
          f"({s['heldout_pairs']} paired samples a seed and arm); calibration: SFT "
          f"{s['calibration'].get('sft_steps')} steps, families {', '.join(s['calibration'].get('families', []))}.", "",
          "| effect over the warm-start (end − SFT) | pooled, instances × seeds bootstrap |", "|---|---|",
          f"| SFT → GRPO | {_iv(p.get('grpo'))} |", f"| SFT → GRPO, shuffled rewards (control) | {_iv(p.get('control'))} |",
          f"| GRPO − control | {_iv(p.get('grpo_vs_control'))} |",
          f"| SFT → GRPO, per-trial Newcombe (v1's, too narrow) | {_iv(p.get('naive_grpo'))} |", "",
          "| seed | episodes | wall | SFT | GRPO end | control end | GRPO effect | control effect |",
          "|---|---|---|---|---|---|---|---|"]
    for r in s["seeds"]:
        pts = r["points"]

        def end(a: str, pts: dict[str, Any] = pts) -> str:
            last = pts.get(a) or {}
            v = last.get(max(last)) if last else None
            return f"{v['successes']}/{v['trials']}" if v else "—"

        sft = pts.get("sft")
        first = f"{sft['successes']}/{sft['trials']}" if sft else "—"
        md.append(f"| {r['seed']} | {r['episodes']} | {r['wall_s'] / 3600:.2f} h | {first} | {end('grpo')} | {end('control')} | "
                  f"{_iv(r.get('grpo'))} | {_iv(r.get('control'))} |")
    odd = [str(r["seed"]) for r in s["seeds"] if not r.get("warm_start_same", True)]
    if odd:
        md.append(f"\n**Warning**: seed(s) {', '.join(odd)}: the SFT point and the arms started from different "
                  "warm-starts (warm_start_keys): their effects do not pair.")
    md += ["", "| family | instances | SFT | GRPO end | control end | GRPO effect | control effect |",
           "|---|---|---|---|---|---|---|"]
    for fam, f in s["families"].items():
        md.append(f"| {fam} | {f['instances']} | {f['sft'][0]}/{f['sft'][1]} | {f['grpo'][0]}/{f['grpo'][1]} | "
                  f"{f['control'][0]}/{f['control'][1]} | {_iv(f.get('grpo_effect'))} | {_iv(f.get('control_effect'))} |")
    return "\n".join(md) + "\n"


def plot(s: dict[str, Any], png: Path) -> None:
    """Two panels drawn with Pillow: held-out pass rate at the warm-start, mid-run and end per arm (thin:
    each seed; thick: their mean), and the train reward per GRPO step per arm (mean over seeds)."""
    from PIL import Image, ImageDraw

    colors = {"grpo": "#2563eb", "control": "#dc2626"}
    w, h, pad = 520, 340, 50
    img = Image.new("RGB", (2 * w, h), "white")
    d = ImageDraw.Draw(img)
    steps = max(1, int(s["design"]["steps"]))
    panels = [("held-out pass rate (thin: seeds)", {a: {int(k): v for k, v in seeds.items()} for a, seeds in
                                                    s["curve"].items()}),
              ("train reward (mean over seeds)", {a: {"mean": _mean_curve(seeds)} for a, seeds in s["train"].items()})]
    for j, (title, series) in enumerate(panels):
        ox = j * w
        x0, y0, x1, y1 = ox + pad, 30, ox + w - 16, h - pad

        def at(x: float, y: float, x0: int = x0, y0: int = y0, x1: int = x1, y1: int = y1) -> tuple[float, float]:
            return x0 + (x1 - x0) * x / steps, y1 - (y1 - y0) * y

        d.text((ox + pad, 8), title, fill="black")
        d.rectangle([x0, y0, x1, y1], outline="#9ca3af")
        for yv in (0, 0.5, 1):
            d.text((ox + 8, at(0, yv)[1] - 6), f"{yv:.1f}", fill="#4b5563")
        for xv in sorted({0, steps // 2, steps}):
            d.text((at(xv, 0)[0] - 4, y1 + 4), str(xv), fill="#4b5563")
        d.text(((x0 + x1) // 2 - 20, y1 + 22), "GRPO step", fill="#4b5563")
        for k, (arm, lines) in enumerate(series.items()):
            c = colors.get(arm, "#16a34a")
            pts_all = [sorted((int(x), y) for x, y in pts.items() if y is not None) for pts in lines.values()]
            for pts in pts_all:
                if len(pts) > 1:
                    d.line([at(x, y) for x, y in pts], fill=c, width=1 if j == 0 else 2)
            if j == 0 and pts_all:
                mean = _mean_curve({i: dict(p) for i, p in enumerate(pts_all)})
                xy = [at(x, y) for x, y in sorted(mean.items())]
                if len(xy) > 1:
                    d.line(xy, fill=c, width=3)
                for px, py in xy:
                    d.ellipse([px - 3, py - 3, px + 3, py + 3], fill=c)
            d.text((x1 - 80, y0 + 4 + 14 * k), arm, fill=c)
    png.parent.mkdir(parents=True, exist_ok=True)
    img.save(png)


def _mean_curve(per_seed: dict[Any, Any]) -> dict[int, float]:
    """Mean over seeds at each step (a seed's curve: ``{step: value}`` or a list of metrics lines)."""
    acc: dict[int, list[float]] = {}
    for curve in per_seed.values():
        items = curve.items() if isinstance(curve, dict) else [(x["step"], x["reward_mean"]) for x in curve]
        for k, v in items:
            if v is not None:
                acc.setdefault(int(k), []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sorted(acc.items())}
