"""CPU trainer throughput vs a plain PyTorch forward/backward of the same batch.

Prints tokens/s of one :class:`openforge.train.cpu.CPUTrainer` GRPO step on ``--batch`` segments of
``--tokens`` tokens (SmolLM2-135M, fp32, loss mask on the second half) next to a baseline measured
in the same run: ``model(ids).logits → log_softmax → gather → masked clipped loss → backward →
AdamW step`` written in plain PyTorch with no chunking or micro-batching. The ratio is the trainer's
overhead (or gain: chunked logprobs avoid the full-vocabulary log_softmax copies, and the head runs
only where the loss mask is 1).

``--head-only`` times just that last part, on a harness-shaped batch: :func:`token_logprobs` forward +
backward with the ``lm_head`` / ``log_softmax`` at every position (the baseline) against only at the
trained positions (what the trainer does), same batch, same run.

    python benchmarks/train_step.py                 # 8 × 512, 2 timed steps each after a warm-up
    python benchmarks/train_step.py --batch 2 --tokens 256 --steps 1
    python benchmarks/train_step.py --head-only --batch 2 --tokens 1700 --trained 200   # a pi-sized call

``--shared N`` times an SFT step of :class:`CPUTrainer` on segments whose first N tokens are the same
(a harness's system prompt and tools), with ``share_prefix`` off (the baseline) and on, same run:

    python benchmarks/train_step.py --shared 1500 --batch 8 --tokens 1700 --trained 70 --steps 1  # pi SFT
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per variant (after one warm-up)")
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--trainer-only", action="store_true",
                    help="skip the baseline (to read the trainer's own peak RSS)")
    ap.add_argument("--trainable-layers", type=int, default=None,
                    help="also time the trainer with only the last N layers trained")
    ap.add_argument("--trained", type=int, default=None, help="trained (generated) tokens per segment, at its "
                    "end (default: half)")
    ap.add_argument("--head-only", action="store_true",
                    help="time token_logprobs at every position vs at the trained ones only")
    ap.add_argument("--shared", type=int, default=None,
                    help="segments share their first N tokens: time an SFT step with share_prefix off vs on")
    args = ap.parse_args()
    if args.head_only:
        return head_only(args)
    if args.shared:
        return prefix_sharing(args)

    import torch

    from openforge.proxy.backends.transformers import load_smollm2
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
    from openforge.train.grpo import TrainSample, policy_loss

    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_smollm2()
    B, T = args.batch, args.tokens
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 49000, (B, T), generator=g)
    half = T - args.trained if args.trained else T // 2
    mask = [0] * half + [1] * (T - half)
    n_trained = B * (T - half)
    samples = [TrainSample(input_ids=ids[i].tolist(), loss_mask=mask, old_logprobs=[-10.0 * m for m in mask],
                           advantage=1.0 if i % 2 else -1.0, token_weights=[m / n_trained for m in mask])
               for i in range(B)]

    # -- baseline: plain PyTorch, whole batch, full logits
    opt = torch.optim.AdamW(model.parameters(), lr=1e-7)
    w = torch.tensor([s.token_weights[1:] for s in samples])
    old = torch.tensor([s.old_logprobs[1:] for s in samples])
    adv = torch.tensor([s.advantage for s in samples])

    def plain_step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
        loss, _ = policy_loss(logp, old, adv, w)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    trainer = CPUTrainer(model, CPUTrainerConfig(lr=1e-7, micro_batch_tokens=args.micro_batch_tokens))

    def trainer_step() -> None:
        trainer.step(samples)

    def timed(fn) -> float:
        fn()  # warm-up
        best = float("inf")
        for _ in range(args.steps):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        return best

    t_plain = timed(plain_step) if not args.trainer_only else float("nan")
    rss_plain = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t_trainer = timed(trainer_step)
    rss_all = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t_partial = None
    if args.trainable_layers:
        partial = CPUTrainer(model, CPUTrainerConfig(lr=1e-7, micro_batch_tokens=args.micro_batch_tokens,
                                                     trainable_layers=args.trainable_layers))
        t_partial = timed(lambda: partial.step(samples))
    tok = B * T
    print(f"batch {B} × {T} tokens ({tok} tokens, {n_trained} trained), torch threads {torch.get_num_threads()}")
    print(f"{'variant':<34}{'s/step':>10}{'tokens/s':>12}")
    print(f"{'plain PyTorch forward/backward':<34}{t_plain:>10.2f}{tok / t_plain:>12.1f}")
    print(f"{'openforge CPUTrainer.step':<34}{t_trainer:>10.2f}{tok / t_trainer:>12.1f}")
    if t_partial:
        label = f"CPUTrainer, last {args.trainable_layers} layers"
        print(f"{label:<34}{t_partial:>10.2f}{tok / t_partial:>12.1f}")
    print(f"trainer / plain throughput ratio: {t_plain / t_trainer:.2f}  (>1 = trainer faster)")
    print(f"peak RSS: {rss_plain:.2f} GiB after plain, {rss_all:.2f} GiB after both (ru_maxrss is a high-water mark)")


def _model(args: argparse.Namespace) -> Any:
    import torch

    from openforge.proxy.backends.transformers import load_smollm2

    if args.threads:
        torch.set_num_threads(args.threads)
    return load_smollm2()[0]


def _interleaved(variants: dict[Any, Callable[[], float]], steps: int) -> dict[Any, float]:
    """Best of ``steps`` seconds per variant, one warm-up first, the variants taking turns so that a
    drift in machine load hits each alike."""
    next(iter(variants.values()))()
    times: dict[Any, list[float]] = {k: [] for k in variants}
    for _ in range(steps):
        for k, fn in variants.items():
            times[k].append(fn())
    return {k: min(v) for k, v in times.items()}


def head_only(args: argparse.Namespace) -> None:
    """token_logprobs forward + backward: every position (baseline) vs the trained positions only."""
    import torch

    from openforge.train.logprobs import token_logprobs

    model = _model(args)
    B, T = args.batch, args.tokens
    trained = args.trained or T // 2
    ids = torch.randint(10, 49000, (B, T), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    pos = torch.zeros(B, T - 1, dtype=torch.bool)
    pos[:, T - 1 - trained:] = True

    def step(positions: torch.Tensor | None) -> float:
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        lp = token_logprobs(model, ids, attn, positions=positions)
        (lp * pos).sum().backward()
        return time.perf_counter() - t

    best = _interleaved({"every": lambda: step(None), "only": lambda: step(pos)}, args.steps)
    e, o = best["every"], best["only"]
    print(f"batch {B} × {T} tokens, {trained} trained per segment, torch threads {torch.get_num_threads()}")
    print(f"{'token_logprobs fwd+bwd':<34}{'s (best of ' + str(args.steps) + ')':>16}")
    print(f"{'head at every position (baseline)':<34}{e:>16.2f}")
    print(f"{'head at trained positions only':<34}{o:>16.2f}")
    print(f"speed-up: {e / o:.2f}x")


def prefix_sharing(args: argparse.Namespace) -> None:
    """An SFT step on segments sharing ``--shared`` leading tokens: share_prefix off (baseline) vs on."""
    import torch

    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
    from openforge.train.grpo import TrainSample

    model = _model(args)
    B, T, P = args.batch, args.tokens, args.shared
    trained = args.trained or (T - P) // 2
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(10, 49000, (P,), generator=g).tolist()
    samples = []
    for _ in range(B):
        ids = prefix + torch.randint(10, 49000, (T - P,), generator=g).tolist()
        mask = [0] * (T - trained) + [1] * trained
        samples.append(TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[0.0] * T, advantage=0.0,
                                   token_weights=[m / (B * trained) for m in mask]))
    trainers = {share: CPUTrainer(model, CPUTrainerConfig(lr=1e-9, share_prefix=share,
                                                          micro_batch_tokens=args.micro_batch_tokens))
                for share in (False, True)}
    metrics: dict[bool, dict[str, float]] = {}

    def step(share: bool) -> float:
        t = time.perf_counter()
        metrics[share] = trainers[share].step(samples, kind="sft")
        return time.perf_counter() - t

    best = _interleaved({False: lambda: step(False), True: lambda: step(True)}, args.steps)
    off, on = best[False], best[True]
    print(f"SFT step: {B} segments × {T} tokens, first {P} shared, {trained} trained each; "
          f"micro_batch_tokens {args.micro_batch_tokens}, torch threads {torch.get_num_threads()}")
    print(f"{'share_prefix':<16}{'s/step':>10}{'micro-batches':>15}{'loss':>12}")
    for share, t in ((False, off), (True, on)):
        m = metrics[share]
        print(f"{share!s:<16}{t:>10.2f}{int(m['micro_batches']):>15}{m['loss']:>12.6f}")
    print(f"speed-up: {off / on:.2f}x")


if __name__ == "__main__":
    main()
