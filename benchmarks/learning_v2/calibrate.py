"""Calibration: which SFT checkpoint GRPO starts from, and which families it trains on.

Owns: :func:`calibrate` (the three stages below, each written under ``OUT/calibration/`` and reused
when there, then ``OUT/calibration.json`` / ``.md``), :func:`pick_checkpoint` and :func:`band`.

1. The SFT curve: the warm-start stopped after each of ``sft_steps`` optimizer steps, measured on
   ``val_instances`` held-out instances *beyond* the fixed held-out set (the generated held-out stream is
   prefix-stable: the fixed set is its first ``heldout`` instances, the validation ones follow), so the
   choice never looks at the instances the verdict is computed on. :func:`pick_checkpoint` takes the
   earliest checkpoint reaching half the curve's best success (RL tends to help most from an early
   one, and it leaves the families room to improve).
2. The family mix: at that checkpoint, ``tasks_per_family`` train instances × ``group_size`` rollouts
   at the training temperature per candidate family; :func:`band` keeps the families whose pass rate
   lies in ``band`` (20–80 %: GRPO groups are then mostly mixed) and drops the others, saying why (the
   generators have no difficulty knob to harden a family with; a family outside the band is hardened
   by changing its generator in ``openforge/envs/claw/gen_families.py``, then calibrating again).
3. The check: the kept families' pass rates again, with the warm-start the runs will use (it trains on
   the kept families' train stream only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .design import Calibration, Design, config, sft_overrides
from .measure import family_rates, held_point


def pick_checkpoint(curve: dict[int, float]) -> int:
    """The earliest SFT step whose held-out success is at least half the curve's best (the last step
    when nothing succeeds: the warm-start taught nothing measurable, the most-trained one is kept).

    >>> pick_checkpoint({2: 0.05, 4: 0.2, 8: 0.3, 16: 0.32})
    4
    >>> pick_checkpoint({2: 0.0, 4: 0.0})
    4
    """
    if not curve:
        raise ValueError("the SFT curve has no point")
    best = max(curve.values())
    if best <= 0:
        return max(curve)
    return min(k for k, v in curve.items() if v >= best / 2)


def band(rates: dict[str, dict[str, Any]], lo_hi: tuple[float, float]) -> tuple[list[str], dict[str, str]]:
    """``(kept, dropped)``: the families whose success rate lies in ``lo_hi`` (inclusive), and why each
    other one was dropped.

    >>> band({"a": {"success_rate": 0.5}, "b": {"success_rate": 0.95}, "c": {"success_rate": 0.0}}, (0.2, 0.8))
    (['a'], {'b': 'too easy: 95 % > 80 %', 'c': 'too hard: 0 % < 20 %'})
    """
    lo, hi = lo_hi
    kept, dropped = [], {}
    for fam, n in rates.items():
        r = n.get("success_rate")
        if r is None:
            dropped[fam] = "no trainable rollout"
        elif r < lo:
            dropped[fam] = f"too hard: {100 * r:.0f} % < {100 * lo:.0f} %"
        elif r > hi:
            dropped[fam] = f"too easy: {100 * r:.0f} % > {100 * hi:.0f} %"
        else:
            kept.append(fam)
    return kept, dropped


def _rate(point: dict[str, Any]) -> float:
    n = next(iter(point["per_harness"].values()))
    return float(n.get("pass_rate") or 0.0)


async def calibrate(design: Design, out: Path, overrides: list[str], log: Any = print) -> Calibration:
    """Stages 1–3 (module docstring); each stage's measurement is reused on a rerun."""
    cdir = out / "calibration"
    seed = design.seeds[0]
    curve: dict[int, float] = {}
    for k in design.sft_steps:
        cfg = config(design, seed=seed, families=design.families, overrides=overrides,
                     heldout=design.heldout + design.val_instances,
                     extra=[f"run_dir={cdir / f'sft-{k}'}", *sft_overrides(k), "eval.heldout.enabled=true"])
        point = await held_point(cfg, cdir / f"sft-{k}" / "val", label=f"sft-{k}", warm=True, skip=design.heldout,
                                 trials=design.val_trials)
        curve[k] = _rate(point)
        log(f"calibration: SFT after {k} steps: {100 * curve[k]:.0f} % of the validation instances")
    pick = pick_checkpoint(curve)

    def rates_of(families: tuple[str, ...], name: str) -> Any:
        cfg = config(design, seed=seed, families=families, overrides=overrides,
                     extra=[f"run_dir={cdir / name}", *sft_overrides(pick), "eval.heldout.enabled=false"])
        return family_rates(cfg, design.tasks_per_family, cdir / name / "families.json")

    first = await rates_of(design.families, f"families-sft{pick}")
    kept, dropped = band(first["families"], design.band)
    # the check measures the kept mix's own warm-start; when nothing was dropped that is the first pass's
    check = None if not kept else first if tuple(kept) == tuple(design.families) else \
        await rates_of(tuple(kept), f"check-sft{pick}")
    cal = Calibration(pick, tuple(kept), {
        "sft_curve": curve, "rule": "earliest SFT step reaching half the curve's best validation success",
        "validation": {"instances": design.val_instances, "trials": design.val_trials,
                       "beyond_heldout": design.heldout},
        "band": list(design.band), "candidates": first, "dropped": dropped, "check": check, "seed": seed})
    cal.save(out)
    (out / "calibration.md").write_text(calibration_md(cal))
    log(calibration_md(cal))
    return cal


def calibration_md(cal: Calibration) -> str:
    d = cal.details
    rows = ["| SFT steps | validation success |", "|---|---|"]
    rows += [f"| {k}{' ← picked' if int(k) == cal.sft_steps else ''} | {100 * v:.0f} % |"
             for k, v in d.get("sft_curve", {}).items()]
    rows += ["", "| family | train pass (all candidates' SFT) | kept's SFT | verdict |", "|---|---|---|---|"]
    check = (d.get("check") or {}).get("families", {})
    for fam, n in (d.get("candidates") or {}).get("families", {}).items():
        again = check.get(fam)
        second = f"{again['successes']}/{again['rollouts']}" if again else "—"
        rows.append(f"| {fam} | {n['successes']}/{n['rollouts']} | {second} | {d.get('dropped', {}).get(fam, 'kept')} |")
    return (f"Calibration: SFT checkpoint {cal.sft_steps} steps; families {', '.join(cal.families) or 'none'} "
            f"(band {', '.join(f'{100 * b:.0f} %' for b in d.get('band', []))})\n\n" + "\n".join(rows) + "\n")
