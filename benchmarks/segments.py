"""Benchmark: segment building cost per token, and durable store append throughput.

Prints, in one run:
1. build_segments + validate_segments time per token for final contexts of 1k..128k tokens and
   1..200 calls (a main agent interleaved with a sub-agent). "Per token" divides by the total
   prompt+output tokens the calls carry, i.e. the input size; a flat column means linear total cost.
2. Durable append throughput (calls/s) of TrajectoryStore against a plain JSONL writer that fsyncs
   every call, both with 1 and 16 concurrent writers, and the ratio.

Run: python benchmarks/segments.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from openforge.core.trajectory import build_segments, validate_segments
from openforge.core.types import ModelCall
from openforge.store import TrajectoryStore


def conversation(context: int, n_calls: int) -> list[ModelCall]:
    """Main agent (2/3 of the calls) interleaved with a sub-agent; final main context ~= `context`."""
    base = list(range(10_000, 10_000 + context + 64))
    sub_base = list(range(200_000, 200_000 + context + 64))
    n_main = max(1, (2 * n_calls) // 3) if n_calls > 1 else 1
    n_sub = n_calls - n_main
    step = max(2, context // n_main)
    out_len = max(1, step // 4)
    calls: list[ModelCall] = []
    m = s = 0
    sys_len = 16
    for i in range(n_calls):
        use_sub = n_sub and (i % 3 == 2) and s < n_sub
        src, k = (sub_base, s) if use_sub else (base, m)
        stepk = max(2, context // (n_sub if use_sub else n_main))
        olen = max(1, stepk // 4)
        end = (k + 1) * stepk
        prompt = src[: end - olen]
        out = src[end - olen : end]
        calls.append(ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[-0.5] * len(out),
                               system_prefix_len=sys_len))
        if use_sub:
            s += 1
        else:
            m += 1
    del step, out_len
    return calls


def bench_segments(contexts: list[int], call_counts: list[int]) -> None:
    print("## build_segments + validate_segments (main agent + interleaved sub-agent)")
    print(f"{'context':>8} {'calls':>6} {'input tokens':>13} {'segments':>8} {'build ms':>9} {'validate ms':>11} "
          f"{'ns/token':>9}")
    for ctx in contexts:
        for n in call_counts:
            calls = conversation(ctx, n)
            total = sum(len(c.prompt_ids) + len(c.output_ids) for c in calls)
            best_b = best_v = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                segs, _ = build_segments(calls, reward=1.0)
                t1 = time.perf_counter()
                validate_segments(calls, segs)
                t2 = time.perf_counter()
                best_b, best_v = min(best_b, t1 - t0), min(best_v, t2 - t1)
            print(f"{ctx:>8} {n:>6} {total:>13,} {len(segs):>8} {best_b * 1e3:>9.2f} {best_v * 1e3:>11.2f} "
                  f"{(best_b + best_v) / total * 1e9:>9.2f}")


class JsonlFsyncWriter:
    """The baseline: append one JSON line per call and fsync it (under a lock)."""

    def __init__(self, path: Path):
        self.f = path.open("a", encoding="utf-8")
        self.lock = threading.Lock()

    def append_call(self, rollout_id: str, call: ModelCall) -> None:
        line = json.dumps({"rollout_id": rollout_id, **call.model_dump(mode="json")}) + "\n"
        with self.lock:
            self.f.write(line)
            self.f.flush()
            os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def bench_store(n_writers: int, calls_per_writer: int, prompt_growth: int) -> dict[str, float]:
    results = {}
    per_writer = []
    for w in range(n_writers):
        ctx, calls = list(range(w * 10**6, w * 10**6 + 500)), []
        for i in range(calls_per_writer):
            out = list(range(7_000_000 + i * 100, 7_000_000 + i * 100 + 50))
            calls.append(ModelCall(index=i, prompt_ids=list(ctx), output_ids=out, output_logprobs=[-0.25] * 50,
                                   request={"messages": [{"role": "user", "content": "x" * 200}]}))
            ctx = ctx + out + list(range(8_000_000 + i * prompt_growth, 8_000_000 + (i + 1) * prompt_growth))
        per_writer.append(calls)
    with tempfile.TemporaryDirectory() as d:
        for name, make in [("jsonl+fsync", lambda: JsonlFsyncWriter(Path(d) / "calls.jsonl")),
                           ("TrajectoryStore", lambda: TrajectoryStore(Path(d) / "store.db"))]:
            writer = make()

            def run(w: int, writer=writer) -> None:
                for c in per_writer[w]:
                    writer.append_call(f"r{w}", c)

            threads = [threading.Thread(target=run, args=(w,)) for w in range(n_writers)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dt = time.perf_counter() - t0
            writer.close()
            results[name] = n_writers * calls_per_writer / dt
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke)")
    a = ap.parse_args()
    contexts = [1024, 8192, 32768] if a.quick else [1024, 8192, 32768, 131072]
    counts = [1, 10, 50] if a.quick else [1, 10, 50, 200]
    bench_segments(contexts, counts)
    print()
    print("## durable append throughput (calls/s; every call acknowledged only once on disk)")
    print(f"{'writers':>8} {'jsonl+fsync':>12} {'TrajectoryStore':>16} {'ratio':>7}")
    for writers in (1, 16):
        r = bench_store(writers, 20 if a.quick else 50, 200)
        print(f"{writers:>8} {r['jsonl+fsync']:>12.0f} {r['TrajectoryStore']:>16.0f} "
              f"{r['TrajectoryStore'] / r['jsonl+fsync']:>6.2f}x")


if __name__ == "__main__":
    main()
