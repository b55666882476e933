"""Episodes per hour of a CPU GRPO run with each rollout engine, on the same tasks, in one run.

Runs ``claw-grpo`` (react harness, the easy claw tasks, SmolLM2-135M with a LoRA adapter, no warm-start)
for ``--steps`` GRPO steps of ``--tasks`` tasks × ``--group`` rollouts, once with ``rollout.engine=
transformers`` (in-process: sampling and training share the module) and once with ``rollout.engine=vllm``
(a vLLM CPU server gets the adapter after each step), in the order given by ``--order``. Each engine's
run starts from the same model and draws the same tasks (same seed). Prints, per engine: episodes, wall
seconds of the GRPO steps (rollouts + training + policy push), the rollouts discarded as infrastructure
errors (not counted as episodes), episodes per hour over that wall time and
over the rollout time alone, the mean adapter push time, and the ratio vllm / transformers. Writes ``--json``.

    scripts/vllm-server.sh start     # loopback, LoRA enabled; the server holds ~5 GB (heavy lock)
    flock /tmp/openforge-heavy.lock nice -n 5 python benchmarks/rollout_engines.py --json benchmarks/results/rollout_engines-DATE.json

Both engines share the machine's cores with whatever else runs: compare the two numbers of one run, and
say what load it ran under (``load_avg`` in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:18765")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=4, help="tasks per step")
    ap.add_argument("--group", type=int, default=4, help="rollouts per task")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--order", default="transformers,vllm")
    ap.add_argument("--json", default=None, help="write the results here")
    return ap.parse_args()


def run_engine(engine: str, a: argparse.Namespace, root: Path) -> dict[str, Any]:
    from openforge.runner.forge import run

    t0 = time.perf_counter()
    summary = run(recipe="claw-grpo", preset="cpu", progress=False, overrides=[
        f"run_dir={root / engine}", f"rollout.engine={engine}", "rollout.vllm_start=false",
        f"rollout.vllm_url={a.url}?logprobs_mode=processed_logprobs", f"trainer.cpu.lora.rank={a.lora_rank}",
        "sft.enabled=false", "eval.heldout.enabled=false", f"trainer.steps={a.steps}",
        f"rollout.tasks_per_step={a.tasks}", f"rollout.group_size={a.group}", f"rollout.concurrency={a.concurrency}",
        "trainer.cpu.max_resample_rounds=0", "trainer.cpu.skip_zero_advantage=false", "trainer.checkpoint_every=0",
        "trainer.cpu.lr=1.0e-5"])
    total = time.perf_counter() - t0
    steps = summary["steps"]
    episodes = sum(s["rollouts"] for s in steps)  # trainable ones (success, policy_failure, timeout)
    discarded = sum(v for s in steps for k, v in s["statuses"].items() if k not in ("success", "policy_failure", "timeout"))
    wall = sum(s["step_time_s"] for s in steps)
    roll = sum(s["rollout_time_s"] for s in steps)
    pushes = [s["policy_push_s"] for s in steps if s.get("gradient_step") or s.get("train/trained_tokens")]
    return {"engine": summary.get("rollout_engine"), "episodes": episodes, "discarded_rollouts": discarded,
            "statuses": [s["statuses"] for s in steps], "steps": len(steps),
            "step_wall_s": round(wall, 1), "rollout_s": round(roll, 1), "run_wall_s": round(total, 1),
            "episodes_per_hour": round(episodes * 3600 / wall, 1) if wall else 0.0,
            "rollout_episodes_per_hour": round(episodes * 3600 / roll, 1) if roll else 0.0,
            "pass_rate": [s["pass_rate"] for s in steps], "generated_tokens": sum(s["generated_tokens"] for s in steps),
            "policy_push_s_mean": round(sum(pushes) / len(pushes), 4) if pushes else None,
            "stale_rollouts": sum(s.get("stale_rollouts", 0) for s in steps)}


def main() -> None:
    a = _args()
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
                           "cores": os.cpu_count(), "load_avg_before": os.getloadavg(),
                           "settings": {k: v for k, v in vars(a).items() if k != "json"}, "engines": {}}
    with tempfile.TemporaryDirectory(prefix="openforge-engines-") as tmp:
        for engine in a.order.split(","):
            r = run_engine(engine, a, Path(tmp))
            out["engines"][engine] = r
            print(f"{engine:13s} {r['episodes']:4d} episodes in {r['step_wall_s']:7.1f}s: "
                  f"{r['episodes_per_hour']:7.1f} episodes/h ({r['rollout_episodes_per_hour']:.1f}/h counting rollouts "
                  f"only); push {r['policy_push_s_mean']}s; engine {r['engine']}", flush=True)
    out["load_avg_after"] = os.getloadavg()
    e = out["engines"]
    if "vllm" in e and "transformers" in e and e["transformers"]["episodes_per_hour"]:
        out["ratio_vllm_over_transformers"] = round(e["vllm"]["episodes_per_hour"] / e["transformers"]["episodes_per_hour"], 3)
        out["ratio_rollouts_only"] = round(e["vllm"]["rollout_episodes_per_hour"]
                                           / max(e["transformers"]["rollout_episodes_per_hour"], 1e-9), 3)
        print(f"vllm / transformers: {out['ratio_vllm_over_transformers']}x episodes/h "
              f"({out['ratio_rollouts_only']}x counting rollouts only)")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
