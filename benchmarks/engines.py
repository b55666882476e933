"""The two CPU token back-ends on the same prompts and the same fp32 SmolLM2 weights: a real vLLM server
(``vllm:``, started by ``scripts/vllm-server.sh``) against the in-process transformers back-end.

For 1 and 8 concurrent streams it measures generation tokens/s (short prompts, ``--gen-tokens`` new
tokens each at temperature 1; output tokens counted as returned, since either may stop at EOS) and
prefill tokens/s (``--prefill-tokens``-token prompts, one new token; every prompt starts with a
distinct line so vLLM's prefix cache cannot reuse a previous run's prefill). Both engines are driven
through the same ``TokenBackend.generate`` interface, alternately, ``--repeats`` times; each cell is the
median, and the ratio vLLM / transformers is measured in the same run. Writes ``--json``.

    scripts/vllm-server.sh start          # under the heavy lock: the server holds ~5 GB
    flock /tmp/openforge-heavy.lock nice -n 5 python benchmarks/engines.py --json benchmarks/results/engines.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from typing import Any

from openforge.proxy.backends.base import SamplingParams, TokenBackend

TOPICS = ["the sea", "a mountain village", "an old clock", "the first snow", "a busy market", "a lost key",
          "a night train", "the last library"]


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("OPENFORGE_VLLM_URL", "http://127.0.0.1:18765/v1"))
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prefill-tokens", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    return ap.parse_args()


def gen_prompts(tok: Any, n: int, run: int) -> list[list[int]]:
    msgs = [[{"role": "user", "content": f"({run}.{i}) Write a short story about {TOPICS[i % len(TOPICS)]}."}]
            for i in range(n)]
    out = []
    for m in msgs:
        ids = tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))  # transformers 5: a BatchEncoding
    return out


def prefill_prompts(tok: Any, n: int, run: int, length: int) -> list[list[int]]:
    filler = tok.encode(" ".join(f"Line {k}: the quick brown fox jumps over the lazy dog." for k in range(length // 8)))
    return [(tok.encode(f"Document {run}-{i} ({TOPICS[i % len(TOPICS)]}):\n") + filler)[:length] for i in range(n)]


async def _timed(backend: TokenBackend, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int, int]:
    """(seconds, prompt tokens, output tokens) of all ``prompts`` generated concurrently."""
    t0 = time.perf_counter()
    gens = await asyncio.gather(*[backend.generate(p, params) for p in prompts])
    dt = time.perf_counter() - t0
    return dt, sum(map(len, prompts)), sum(len(g.output_ids) for g in gens)


async def measure(engines: dict[str, TokenBackend], tok: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n in [int(s) for s in args.streams.split(",")]:
        for kind in ("generation", "prefill"):
            rates: dict[str, list[float]] = {name: [] for name in engines}
            for r in range(args.repeats):
                if kind == "generation":
                    prompts = gen_prompts(tok, n, r)
                    params = SamplingParams(temperature=1.0, max_tokens=args.gen_tokens)
                else:
                    prompts = prefill_prompts(tok, n, r, args.prefill_tokens)
                    params = SamplingParams(temperature=1.0, max_tokens=1)
                order = list(engines) if r % 2 == 0 else list(reversed(engines))
                for name in order:
                    dt, p_tok, o_tok = await _timed(engines[name], prompts, params)
                    rates[name].append((o_tok if kind == "generation" else p_tok) / dt)
            row = {"kind": kind, "streams": n, **{name: statistics.median(v) for name, v in rates.items()},
                   "runs": rates}
            row["ratio"] = row["vllm"] / row["transformers"]
            rows.append(row)
            print(f"{kind:>10} x{n}: vllm {row['vllm']:7.1f} tok/s   transformers {row['transformers']:7.1f} tok/s"
                  f"   ratio {row['ratio']:.2f}", flush=True)
    return rows


async def main() -> None:
    args = _args()
    import torch

    from openforge.proxy.backends import parse_backend_spec
    from openforge.proxy.backends.hf_loading import load_smollm2
    from openforge.proxy.backends.transformers import TransformersBackend

    model, tok = load_smollm2()
    hf = TransformersBackend(model, tok, max_batch=8)
    vllm = parse_backend_spec(f"vllm:{args.url}?logprobs_mode=processed_logprobs", tokenizer=tok)
    await vllm.ready()
    if vllm.max_context is None:
        raise SystemExit(f"no vLLM server answers at {args.url}: start one with scripts/vllm-server.sh start")
    engines: dict[str, TokenBackend] = {"transformers": hf, "vllm": vllm}
    await _timed(hf, gen_prompts(tok, 1, 99), SamplingParams(max_tokens=4))  # warm-up, not measured
    await _timed(vllm, gen_prompts(tok, 1, 99), SamplingParams(max_tokens=4))
    rows = await measure(engines, tok, args)
    await vllm.aclose()
    await hf.aclose()
    meta = {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
            "load_avg_at_end": os.getloadavg(), "gen_tokens": args.gen_tokens, "prefill_tokens": args.prefill_tokens,
            "repeats": args.repeats, "vllm_url": args.url, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
