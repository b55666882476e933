"""Continuous batching in the transformers back-end against the batch-at-a-time policy it replaced, same
model, same requests, same run (the machine is shared: read the ratio, not the seconds).

``--requests`` chat prompts of a harness's size (``--prompt-tokens``, SmolLM2-135M, fp32) arrive one every
``--gap`` seconds, as concurrent rollouts' calls do, each asking for ``--max-tokens`` tokens sampled at
T=1 (a fixed seed per request, so both policies decode the same ids). Batch-at-a-time
(``continuous=False``): a request that arrives while a batch decodes waits for the whole batch to end.
Continuous: it joins the running batch at the next token and is answered as soon as it finishes.

    python benchmarks/decode_batching.py                        # 8 requests, 1 s apart, 96 tokens each
    python benchmarks/decode_batching.py --requests 4 --gap 2 --max-tokens 160

Prints, per policy, the wall time to answer all requests, the mean and max latency of a request and
tokens/s, then the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import time


async def serve(backend, prompts, params, gap: float) -> dict[str, float]:
    t0 = time.monotonic()
    lat: list[float] = []
    toks = 0

    async def one(i: int, ids: list[int]) -> None:
        nonlocal toks
        await asyncio.sleep(i * gap)
        t = time.monotonic()
        g = await backend.generate(ids, params[i])
        lat.append(time.monotonic() - t)
        toks += len(g.output_ids)

    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    wall = time.monotonic() - t0
    return {"wall_s": wall, "mean_latency_s": sum(lat) / len(lat), "max_latency_s": max(lat), "tokens": toks,
            "tok_per_s": toks / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between two arrivals")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompt-tokens", type=int, default=460)
    args = ap.parse_args()

    from openforge.proxy.backends.base import SamplingParams
    from openforge.proxy.backends.transformers import TransformersBackend, load_model

    model, tok = load_model("smollm2-135m")
    text = "Summarise the files in the work directory and report what each one holds. " * 40
    base = tok.encode(text)[: args.prompt_tokens - 8]
    prompts = [[*base, *tok.encode(f" request {i}")] for i in range(args.requests)]
    # min_tokens-free: stop only at max_tokens so both policies decode the same amount
    params = [SamplingParams(temperature=1.0, max_tokens=args.max_tokens, seed=1000 + i) for i in range(args.requests)]
    rows = {}
    for name, cont in (("batch-at-a-time", False), ("continuous", True)):
        backend = TransformersBackend(model, tok, continuous=cont)
        backend._eos = []  # decode exactly max_tokens per request
        rows[name] = asyncio.run(serve(backend, prompts, params, args.gap))
        rows[name]["batches"] = str(backend.batches)
    print(f"{args.requests} requests of {args.prompt_tokens} prompt tokens, one every {args.gap:g} s, "
          f"{args.max_tokens} tokens each\n")
    print("| policy | wall s | mean latency s | max latency s | tok/s | batches (size at each admission) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall_s']:.1f} | {r['mean_latency_s']:.1f} | {r['max_latency_s']:.1f} | "
              f"{r['tok_per_s']:.1f} | {r['batches']} |")
    a, b = rows["batch-at-a-time"], rows["continuous"]
    print(f"\ncontinuous / batch-at-a-time: wall {b['wall_s'] / a['wall_s']:.2f}×, mean latency "
          f"{b['mean_latency_s'] / a['mean_latency_s']:.2f}×, tok/s {b['tok_per_s'] / a['tok_per_s']:.2f}×")


if __name__ == "__main__":
    main()
