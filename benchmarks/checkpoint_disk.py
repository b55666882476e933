"""Disk taken by a run's checkpoints: retention + no checkpoint for unchanged weights vs a full
checkpoint per step (the behaviour before).

Both variants save the real SmolLM2-135M with the real :class:`~openforge.train.cpu.CPUTrainer`
(Adam state populated by a real optimizer step) for the same sequence of GRPO steps; whether a step
ran an optimizer step follows ``--pattern`` (``1``: it trained, ``0``: every group tied, nothing
trained). The baseline writes ``step-N`` for every step, each with optimizer state (what openforge
did before); the new path is :class:`~openforge.train.checkpoint.Checkpoints` with the default
``keep_checkpoints=2, keep_best=true``. Prints both sizes and their ratio.

    python benchmarks/checkpoint_disk.py                  # pattern 101101 (6 steps)
    python benchmarks/checkpoint_disk.py --pattern 1111
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def _du(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pattern", default="101101", help="per step: 1 = an optimizer step ran, 0 = none")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, deleted after)")
    args = ap.parse_args()

    from openforge.config import load_config
    from openforge.proxy.backends.transformers import load_smollm2
    from openforge.proxy.render import Renderer
    from openforge.train.checkpoint import Checkpoints
    from openforge.train.cpu import CPUTrainer
    from openforge.train.grpo import TrainSample

    model, tok = load_smollm2()
    trainer = CPUTrainer(model)
    mask = [0] * 8 + [1] * 8
    sample = TrainSample(input_ids=list(range(100, 116)), loss_mask=mask, old_logprobs=[-5.0 * m for m in mask],
                         advantage=1.0, token_weights=[m / 8 for m in mask])
    renderer = Renderer(tok)
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckpt-disk-"))
    cfg = load_config({"recipe": "bench", "trainer": {"steps": len(args.pattern)}})
    try:
        new = Checkpoints(root / "new", cfg, trainer=trainer, tokenizer=tok, template=renderer.template,
                          parser=renderer.parser.name)
        new.weights_changed_before_training()  # the SFT warm-start of the cpu/test presets
        t_old = t_new = 0.0
        for i, bit in enumerate(args.pattern):
            if bit == "1":
                trainer.step([sample])
            t = time.perf_counter()
            trainer.save(root / "old" / f"step-{i + 1}", extra={"grpo_step": i + 1})
            t_old += time.perf_counter() - t
            t = time.perf_counter()
            new.after_step(i + 1, {"reward_mean": 0.25 * (i % 3), "rollouts": 8, "gradient_step": bit == "1"},
                           due=True)
            t_new += time.perf_counter() - t
        old_b, new_b = _du(root / "old"), _du(root / "new")
        print(f"steps {len(args.pattern)} (pattern {args.pattern}): before (a full checkpoint per step) "
              f"{old_b / 2**30:.2f} GiB in {t_old:.0f}s; now (keep 2 + best, unchanged steps not written) "
              f"{new_b / 2**30:.2f} GiB in {t_new:.0f}s, kept {[p.name for p in new.saved()]}; "
              f"ratio {new_b / old_b:.2f}")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
