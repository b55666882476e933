"""The arms of every seed, resumable piece by piece.

Owns: :func:`run_seed` (the seed's warm-start point, then each GRPO arm: trained in segments that end at
the held-out points, each point measured once), :func:`run_arm` and :func:`steps_done` /
:func:`episodes_of` (what a run directory holds so far).

Per seed, with the calibration's SFT steps and families:

- ``sft`` (``OUT/sft/seed<N>/``): the warm-start GRPO starts from, measured on the fixed held-out set.
  Both GRPO arms of the seed start from this same warm-start (same seed, same SFT settings: the same
  cached weights; the report checks the keys agree).
- ``grpo`` and ``control`` (``OUT/<arm>/seed<N>/``): ``openforge.run`` of the ``learn`` preset with the
  design's group size and steps; ``control`` adds ``trainer.cpu.reward_shuffle=group``. A run is
  trained up to the mid-run point, its checkpoint measured (``points/step-<K>/``), then continued to the
  end and measured again. Training resumes from the run's checkpoint (``trainer.resume``).

Everything finished is kept: a rerun skips measured points and continues an unfinished run, so a
benchmark can span several sittings. ``bench.json`` in each directory adds up the wall time of the
pieces run there (training segments and measurements), over every sitting.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from .design import ARMS, Calibration, Design, config, point_dir, run_dir, sft_overrides
from .measure import held_point


def _metrics(rdir: Path) -> list[dict[str, Any]]:
    try:
        lines = [json.loads(x) for x in (rdir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except OSError:
        return []
    return [x for x in lines if "reward_mean" in x]


def steps_done(rdir: Path) -> int:
    """The last GRPO step the run directory's metrics hold (0: none)."""
    return max([int(x["step"]) for x in _metrics(rdir)] or [0])


def episodes_of(rdir: Path) -> int:
    """Rollouts the run's GRPO steps drew (resample rounds included), the last record of each step."""
    return sum(int(x.get("rollouts", 0)) for x in {int(x["step"]): x for x in _metrics(rdir)}.values())


def add_wall(rdir: Path, what: str, seconds: float) -> None:
    """Add ``seconds`` to ``rdir/bench.json`` (``wall_s`` and the piece ``what``)."""
    f = rdir / "bench.json"
    try:
        ledger = json.loads(f.read_text())
    except (OSError, ValueError):
        ledger = {"wall_s": 0.0, "pieces": {}}
    ledger["wall_s"] = round(ledger["wall_s"] + seconds, 1)
    ledger["pieces"][what] = round(ledger["pieces"].get(what, 0.0) + seconds, 1)
    rdir.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(ledger, indent=1))


def note(rdir: Path, key: str, value: Any) -> None:
    """Record ``key: value`` in ``rdir/bench.json`` (next to the wall times)."""
    f = rdir / "bench.json"
    try:
        ledger = json.loads(f.read_text())
    except (OSError, ValueError):
        ledger = {"wall_s": 0.0, "pieces": {}}
    ledger[key] = value
    rdir.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(ledger, indent=1))


async def _timed(rdir: Path, what: str, coro: Any) -> Any:
    t0 = time.monotonic()
    try:
        return await coro
    finally:
        add_wall(rdir, what, time.monotonic() - t0)


async def sft_point(design: Design, cal: Calibration, out: Path, seed: int, overrides: list[str]) -> dict[str, Any]:
    dest = point_dir(out, "sft", seed, 0)
    cfg = config(design, seed=seed, families=cal.families, overrides=overrides,
                 extra=[f"run_dir={dest.parent / f'seed{seed}-run'}", *sft_overrides(cal.sft_steps),
                        "eval.heldout.enabled=true"])
    if (dest / "heldout.json").is_file():
        return json.loads((dest / "heldout.json").read_text())
    return await _timed(dest, "measure sft", held_point(cfg, dest, label="sft", warm=True))


async def run_arm(design: Design, cal: Calibration, out: Path, arm: str, seed: int, overrides: list[str],
                  log: Any = print) -> None:
    """Train ``arm`` of ``seed`` segment by segment to each held-out point and measure it there."""
    import openforge

    rdir = run_dir(out, arm, seed)
    for step in design.points:
        dest = point_dir(out, arm, seed, step)
        if (dest / "heldout.json").is_file():
            continue
        if steps_done(rdir) < step:
            log(f"{arm} seed {seed}: training to step {step} of {design.steps}")
            cfg = config(design, seed=seed, families=cal.families, overrides=overrides, extra=[
                f"run_dir={rdir}", *sft_overrides(cal.sft_steps), "eval.heldout.enabled=false",
                f"trainer.steps={step}", *ARMS[arm]])
            summary = await _timed(rdir, f"train to {step}", asyncio.to_thread(openforge.run, cfg, progress=False))
            if isinstance(summary, dict) and (summary.get("sft") or {}).get("key"):
                note(rdir, "warm_start_key", summary["sft"]["key"])  # the segment that ran the warm-start
        if steps_done(rdir) < step:
            raise SystemExit(f"{arm} seed {seed}: the run in {rdir} stopped before step {step} (see its log)")
        cfg = config(design, seed=seed, families=cal.families, overrides=overrides, extra=[
            f"run_dir={dest / 'run'}", f"model.name={rdir}@{step}", "sft.enabled=false", "eval.heldout.enabled=true"])
        await _timed(rdir, f"measure step {step}", held_point(cfg, dest, label=f"{arm}-step-{step}", warm=False))


async def run_seed(design: Design, cal: Calibration, out: Path, seed: int, overrides: list[str],
                   arms: tuple[str, ...] = tuple(ARMS), log: Any = print) -> None:
    await sft_point(design, cal, out, seed, overrides)
    for arm in arms:
        await run_arm(design, cal, out, arm, seed, overrides, log=log)
