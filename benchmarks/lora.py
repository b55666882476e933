"""LoRA (``trainer.cpu.lora``) against full fine-tuning in the CPU trainer: same model, same samples, same run.

Each variant runs in a fresh process (peak RSS is a per-process high-water mark): the CPU default model
(SmolLM2-135M, fp32, or ``--model``) is loaded as the main job loads it, then ``--steps`` GRPO steps run on
the same synthetic segments of a react rollout's length (``--min-len``..``--max-len`` tokens, the last
``--trained`` of them trained), with the cpu preset's memory settings (gradient checkpointing, heap trim),
and the trainer saves a checkpoint as a run does (weights or adapter, AdamW state, step count). Variants:

- ``full``: every weight trained (today's default);
- ``lora``: a rank-``--rank`` adapter on ``--targets`` (default all-linear), alpha ``--alpha``.

Prints per variant the parameters AdamW trains, the time of one decode step of the served module (the
back-end samples base + the unmerged adapter: the rollouts' cost of LoRA), the mean step time (the first step, which allocates the
optimizer state, is reported apart), the process's peak RSS, and the checkpoint's size (weights alone and
with the optimizer state), then LoRA's ratios against the full fine-tuning baseline measured in the same
run. The machine may be shared: read the ratios, not the seconds.

    python benchmarks/lora.py
    python benchmarks/lora.py --rank 8 --steps 5 --grpo 32
    python benchmarks/lora.py --steps 2 --grpo 2 --min-len 40 --max-len 60 --trained 8   # smoke
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from train_memory import (  # a sibling script (benchmarks/ is sys.path[0])
    peak_rss_gib,
    run_variants,
    segment_sampler,
)

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("full", "lora")


def _mib(path: Path) -> float:
    return path.stat().st_size / 2**20 if path.is_file() else 0.0


def child(args: argparse.Namespace) -> None:
    """One variant, in this process; prints one JSON line."""
    sys.path.insert(0, str(REPO))
    from openforge.config import LoraConfig
    from openforge.proxy.backends.hf_loading import load_model
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    model, tok = load_model(args.model)
    model.eval()
    rng = random.Random(0)
    sample = segment_sampler(tok, args, rng)  # the same segments as train_memory.py

    targets = args.targets if args.targets == "all-linear" else args.targets.split(",")
    lora = LoraConfig(rank=args.rank, alpha=args.alpha, target_modules=targets) if args.variant == "lora" else None
    cfg = CPUTrainerConfig(lr=1e-4 if lora else 1e-5, logprob_chunk=256, micro_batch_tokens=args.micro_batch_tokens,
                           gradient_checkpointing=True, trim_memory=True, lora=lora)
    trainer = CPUTrainer(model, cfg, pad_id=tok.pad_token_id or 0)
    decode_ms = _decode_ms(model, rows=args.decode_rows, steps=args.decode_steps)  # the back-end samples this module
    batch = [sample(rng.choice((-1.0, 1.0)), 1 / (args.grpo * args.trained)) for _ in range(args.grpo)]
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        trainer.step(batch, kind="grpo")
        times.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as d:
        ck = trainer.save(Path(d) / "step-1")
        weights = sum(_mib(f) for f in ck.glob("*.safetensors"))
        total = sum(_mib(f) for f in ck.iterdir())
    later = times[1:] or times
    print(json.dumps({"variant": args.variant, "trained_params": sum(p.numel() for p in trainer.params),
                      "first_step_s": times[0], "step_s": sum(later) / len(later), "peak_rss_gib": peak_rss_gib(),
                      "weights_mib": weights, "checkpoint_mib": total, "decode_ms": decode_ms}))


def _decode_ms(model, *, rows: int, steps: int) -> float:
    """Mean time of one decode step (``rows`` sequences, a 200-token prompt cached) of the served module:
    the rollouts' cost of serving base + an unmerged adapter."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        pkv = model(torch.randint(100, 4000, (rows, 200), generator=g), use_cache=True).past_key_values
        nxt = torch.randint(100, 4000, (rows, 1), generator=g)
        pkv = model(nxt, past_key_values=pkv, use_cache=True).past_key_values  # warm-up
        t0 = time.perf_counter()
        for _ in range(steps):
            pkv = model(nxt, past_key_values=pkv, use_cache=True).past_key_values
    return (time.perf_counter() - t0) / steps * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="smollm2-135m", help="the model (default: the CPU default)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--targets", default="all-linear", help="all-linear or comma-separated module names")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps per variant (the first is reported apart)")
    ap.add_argument("--grpo", type=int, default=16, help="segments per GRPO step (4 groups of 4)")
    ap.add_argument("--min-len", type=int, default=400)
    ap.add_argument("--max-len", type=int, default=900)
    ap.add_argument("--trained", type=int, default=80, help="trained tokens at the end of each segment")
    ap.add_argument("--micro-batch-tokens", type=int, default=2048)
    ap.add_argument("--decode-rows", type=int, default=4, help="rows of the decode-step measurement")
    ap.add_argument("--decode-steps", type=int, default=32, help="decode steps timed per variant")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if args.variant:
        child(args)
        return
    rows = {}
    for name, r in run_variants(__file__, VARIANTS, args):
        rows[name] = r
        print(f"{name:5s} trains {r['trained_params'] / 1e6:.2f} M params · first step {r['first_step_s']:.1f} s · "
              f"step {r['step_s']:.1f} s · peak RSS {r['peak_rss_gib']:.2f} GiB · checkpoint "
              f"{r['weights_mib']:.1f} MiB weights, {r['checkpoint_mib']:.1f} MiB with optimizer state · "
              f"decode step {r['decode_ms']:.1f} ms", flush=True)
    full, lora = rows["full"], rows["lora"]
    print(f"lora vs full (rank {args.rank}, {args.targets}): step time ×{lora['step_s'] / full['step_s']:.2f}, "
          f"peak RSS ×{lora['peak_rss_gib'] / full['peak_rss_gib']:.2f}, "
          f"checkpoint weights ×{lora['weights_mib'] / full['weights_mib']:.4f}, "
          f"checkpoint with optimizer state ×{lora['checkpoint_mib'] / full['checkpoint_mib']:.4f}, "
          f"trained params ×{lora['trained_params'] / full['trained_params']:.4f}, "
          f"decode step (rollouts) ×{lora['decode_ms'] / full['decode_ms']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **rows}, indent=1))


if __name__ == "__main__":
    main()
