"""The CPU trainer's memory levers against its previous settings, same model, same samples, same run.

Each variant runs in a fresh process (peak RSS is a per-process high-water mark): SmolLM2-135M (fp32)
is loaded as the main job loads it, then one SFT step (``--sft`` samples) and one GRPO step (``--grpo``
samples) run on synthetic segments of a react rollout's length (``--min-len``..``--max-len`` tokens, the
last ``--trained`` of them trained). Variants:

- ``baseline``: the settings the main job ran with before (``--micro-batch-tokens``, no checkpointing);
- ``checkpointing``: per-layer activation checkpointing (the decoder runs forward twice);
- ``mb512``: no checkpointing, micro-batches of 512 tokens (a segment longer than that is a batch alone);
- ``checkpointing+trim``: checkpointing, and the heap's free pages returned after each micro-batch
  (``trim_memory``; the cpu preset's settings).

Prints per variant the process's peak RSS, the RSS right after loading (model + libraries) and the two
steps' wall time, then each variant's ratios against the baseline. The machine may be shared: read the
ratios, not the seconds.

    python benchmarks/train_memory.py
    python benchmarks/train_memory.py --micro-batch-tokens 2048 --grpo 32
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {
    "baseline": {"gradient_checkpointing": False},
    "checkpointing": {"gradient_checkpointing": True},
    "mb512": {"gradient_checkpointing": False, "micro_batch_tokens": 512},
    "checkpointing+trim": {"gradient_checkpointing": True, "trim_memory": True},
}


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _current_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def segment_sampler(tok, args: argparse.Namespace, rng: random.Random) -> Callable[[float, float], Any]:
    """``sample(advantage, token_weight)``: a synthetic segment of a react rollout's length
    (``args.min_len``..``args.max_len`` tokens: a harness's shared system prompt, then random ids), the
    last ``args.trained`` of them trained. Also used by ``lora.py``."""
    from openforge.train.grpo import TrainSample

    system = tok.encode("You are a helpful agent with a shell tool. " * 30)  # a harness's shared prompt

    def sample(adv: float, weight: float) -> TrainSample:
        n = rng.randint(args.min_len, args.max_len)
        ids = (system + [rng.randrange(100, 40000) for _ in range(n)])[:n]
        mask = [0] * (n - args.trained) + [1] * args.trained
        return TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-3.0 * m for m in mask], advantage=adv,
                           token_weights=[m * weight for m in mask])

    return sample


def run_variants(script: str, names: Iterable[str], args: argparse.Namespace) -> Iterator[tuple[str, dict]]:
    """Run ``script --variant NAME`` with ``args`` (less ``variant`` and ``json``) in a fresh process per
    variant (peak RSS is a per-process high-water mark); yield each one's JSON row as it finishes."""
    passed = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("variant", "json")]
    for name in names:
        run = subprocess.run([sys.executable, script, "--variant", name, *passed], capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(f"variant {name} failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        yield name, json.loads(run.stdout.strip().splitlines()[-1])


def child(args: argparse.Namespace) -> None:
    """One variant, in this process; prints one JSON line."""
    sys.path.insert(0, str(REPO))
    from openforge.proxy.backends.hf_loading import load_model
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    model, tok = load_model("smollm2-135m")
    model.eval()
    loaded = _current_rss_gib()
    rng = random.Random(0)
    sample = segment_sampler(tok, args, rng)
    cfg = CPUTrainerConfig(lr=1e-5, logprob_chunk=256,
                           **{"micro_batch_tokens": args.micro_batch_tokens, **VARIANTS[args.variant]})
    trainer = CPUTrainer(model, cfg, pad_id=tok.pad_token_id or 0)
    sft = [sample(0.0, 1 / (args.sft * args.trained)) for _ in range(args.sft)]
    grpo = [sample(rng.choice((-1.0, 1.0)), 1 / (args.grpo * args.trained)) for _ in range(args.grpo)]
    t0 = time.perf_counter()
    trainer.step(sft, kind="sft")
    t1 = time.perf_counter()
    trainer.step(grpo, kind="grpo")
    t2 = time.perf_counter()
    print(json.dumps({"variant": args.variant, "peak_rss_gib": peak_rss_gib(), "loaded_rss_gib": loaded,
                      "sft_s": t1 - t0, "grpo_s": t2 - t1}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", choices=list(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--sft", type=int, default=8, help="segments in the SFT step (the cpu preset's batch)")
    ap.add_argument("--grpo", type=int, default=16, help="segments in the GRPO step (4 groups of 4)")
    ap.add_argument("--min-len", type=int, default=400)
    ap.add_argument("--max-len", type=int, default=900)
    ap.add_argument("--trained", type=int, default=80, help="trained tokens at the end of each segment")
    ap.add_argument("--micro-batch-tokens", type=int, default=1024)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if args.variant:
        child(args)
        return
    rows = {}
    for name, r in run_variants(__file__, VARIANTS, args):
        rows[name] = r
        print(f"{name:14s} peak RSS {r['peak_rss_gib']:.2f} GiB (after load {r['loaded_rss_gib']:.2f}) · "
              f"SFT step {r['sft_s']:.1f} s · GRPO step {r['grpo_s']:.1f} s", flush=True)
    base = rows["baseline"]
    for name, r in rows.items():
        if name != "baseline":
            print(f"{name:14s} vs baseline: peak RSS ×{r['peak_rss_gib'] / base['peak_rss_gib']:.2f}, "
                  f"SFT time ×{r['sft_s'] / base['sft_s']:.2f}, GRPO time ×{r['grpo_s'] / base['grpo_s']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
