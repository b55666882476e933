"""oneDNN-packed linear weights in the transformers back-end (:mod:`openforge.proxy.backends.hf_packed`)
against the plain weights (MKL's kernel through ``F.linear``), same model, same run, alternating (the
machine is shared: read the ratios, not the milliseconds).

Three measures on SmolLM2-135M in fp32:

- a decode step (one token for each of B rows on top of a ``--prompt-tokens`` prompt), B in ``--rows``;
- prefill of one ``--prompt-tokens`` prompt;
- the back-end end to end: ``--requests`` chat-sized prompts served at once (continuous batching, up to 8
  rows), ``--max-tokens`` tokens each at T=1 with a fixed seed per request.

    python benchmarks/packed_linears.py
    python benchmarks/packed_linears.py --rows 1,4,8 --requests 8 --max-tokens 96

Prints a markdown table per measure with both timings and the ratio packed / plain, and the largest
logprob difference between the two (float rounding of another kernel).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _step_ms(model, packed, rows: int, prompt: int, steps: int, use: bool) -> tuple[float, object]:
    import contextlib

    import torch

    torch.manual_seed(0)
    ids = torch.randint(100, 40000, (rows, prompt))
    ctx = packed.active if use else contextlib.nullcontext
    with torch.inference_mode():
        with ctx():
            cache = model(input_ids=ids, use_cache=True).past_key_values
        nxt, pos = torch.randint(100, 40000, (rows, 1)), torch.full((rows, 1), prompt)
        logits = []
        t = time.perf_counter()
        for i in range(steps):
            with ctx():
                res = model(input_ids=nxt, position_ids=pos + i, past_key_values=cache, use_cache=True)
            cache = res.past_key_values
            logits.append(res.logits[:, -1])
        dt = (time.perf_counter() - t) / steps
    return dt * 1e3, torch.log_softmax(torch.stack(logits), -1)


def _prefill_ms(model, packed, prompt: int, reps: int, use: bool) -> float:
    import contextlib

    import torch

    ids = torch.randint(100, 40000, (1, prompt))
    ctx = packed.active if use else contextlib.nullcontext
    with torch.inference_mode(), ctx():
        model(input_ids=ids)
        t = time.perf_counter()
        for _ in range(reps):
            model(input_ids=ids)
    return (time.perf_counter() - t) / reps * 1e3


async def _serve(model, tok, requests: int, prompt: int, max_tokens: int, use: bool) -> tuple[float, int]:
    from openforge.proxy.backends.base import SamplingParams
    from openforge.proxy.backends.transformers import TransformersBackend

    backend = TransformersBackend(model, tok, packed_linears=use)
    prompts = [[1] + [(i * 37 + j * 11) % 40000 + 100 for j in range(prompt)] for i in range(requests)]
    t = time.perf_counter()
    outs = await asyncio.gather(*(backend.generate(p, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=i))
                                  for i, p in enumerate(prompts)))
    return time.perf_counter() - t, sum(len(o.output_ids) for o in outs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--prompt-tokens", type=int, default=450)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()

    from openforge.proxy.backends.hf_packed import PackedLinears
    from openforge.proxy.backends.transformers import load_model

    model, tok = load_model("smollm2-135m")
    packed = PackedLinears(model)
    if not packed.supported:
        print("oneDNN packing is not supported by this torch build / model")
        return 1
    print(f"# packed_linears, SmolLM2-135M fp32, prompt {args.prompt_tokens} tokens\n")
    print("| measure | plain ms | packed ms | packed / plain | max abs logprob diff |\n|---|---:|---:|---:|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        a, la = _step_ms(model, packed, rows, args.prompt_tokens, args.steps, False)
        b, lb = _step_ms(model, packed, rows, args.prompt_tokens, args.steps, True)
        a2, _ = _step_ms(model, packed, rows, args.prompt_tokens, args.steps, False)
        plain = (a + a2) / 2
        print(f"| decode step, {rows} row(s) | {plain:.1f} | {b:.1f} | {b / plain:.2f} | {(la - lb).abs().max():.1e} |",
              flush=True)
    a = _prefill_ms(model, packed, args.prompt_tokens, 3, False)
    b = _prefill_ms(model, packed, args.prompt_tokens, 3, True)
    print(f"| prefill, 1 × {args.prompt_tokens} tokens | {a:.0f} | {b:.0f} | {b / a:.2f} | |")
    nbytes = packed.nbytes
    packed.release()
    wa, ta = asyncio.run(_serve(model, tok, args.requests, args.prompt_tokens, args.max_tokens, False))
    wb, tb = asyncio.run(_serve(model, tok, args.requests, args.prompt_tokens, args.max_tokens, True))
    print(f"| back-end, {args.requests} requests × {args.max_tokens} tokens (wall) | {wa * 1e3:.0f} | "
          f"{wb * 1e3:.0f} | {wb / wa:.2f} | |")
    print(f"\ntokens/s: plain {ta / wa:.1f}, packed {tb / wb:.1f}; packed copy {nbytes / 2**30:.2f} GiB "
          f"while serving (dropped on a pause)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
