"""Prompt-prefix reuse in the transformers back-end (:mod:`openforge.proxy.backends.hf_prefix`): a prompt
that starts with an earlier call's tokens prefills only the rest and gets the same ids and logprobs (within
float rounding) as without the cache; changed weights never meet keys/values of the old ones."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from testdeps import smollm2_tokenizer, tiny_llama

from openforge.proxy.backends.base import SamplingParams
from openforge.proxy.backends.hf_prefix import MIN_PREFIX, PrefixCache
from openforge.proxy.backends.transformers import TransformersBackend

torch = pytest.importorskip("torch")

GREEDY = SamplingParams(temperature=0, max_tokens=12)
SYSTEM = [(7 * i) % 120 + 3 for i in range(60)]  # a shared "system prompt", longer than MIN_PREFIX


TOK = SimpleNamespace(eos_token_id=None)


def _close(a, b, tol=1e-4):
    assert a.output_ids == b.output_ids
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < tol


async def _two_turns(backend: TransformersBackend):
    """An agent's two turns: the second prompt is the first, its answer and a tool result."""
    first = [*SYSTEM, 5, 9, 17]
    a = await backend.generate(first, GREEDY)
    second = first + a.output_ids + [11, 12, 13, 14]
    return a, second, await backend.generate(second, GREEDY)


async def test_a_next_turn_prefills_only_its_new_tokens_with_unchanged_ids_and_logprobs():
    model = tiny_llama()
    plain = TransformersBackend(model, TOK, prefix_cache_bytes=0)
    cached = TransformersBackend(model, TOK)
    want_a, _second, want_b = await _two_turns(plain)
    got_a, _, got_b = await _two_turns(cached)
    _close(got_a, want_a)
    _close(got_b, want_b)
    # the second call reused everything the first one ran: its prompt and all but its last sampled token
    assert cached.prefix.hits == len(SYSTEM) + 3 + len(want_a.output_ids) - 1
    assert cached.prefix.misses == len(SYSTEM) + 3 + 1 + 4


async def test_other_rollouts_reuse_the_shared_system_prompt():
    model = tiny_llama()
    cached = TransformersBackend(model, TOK)
    plain = TransformersBackend(model, TOK, prefix_cache_bytes=0)
    await cached.generate([*SYSTEM, 5, 9, 17], GREEDY)
    other = [*SYSTEM, 40, 41, 42, 43]
    _close(await cached.generate(other, GREEDY), await plain.generate(other, GREEDY))
    assert cached.prefix.hits == len(SYSTEM)


async def test_rows_with_and_without_a_cached_prefix_decode_in_one_batch():
    model = tiny_llama()
    plain = TransformersBackend(model, TOK, prefix_cache_bytes=0)
    cached = TransformersBackend(model, TOK)
    first = [*SYSTEM, 5, 9, 17]
    a = await cached.generate(first, GREEDY)
    prompts = [first + a.output_ids + [20, 21], [3, 4, 5, 6, 7], [*SYSTEM, 99]]
    got = await asyncio.gather(*(cached.generate(p, GREEDY) for p in prompts))
    assert cached.batches[-1] == 3  # admitted together: one cold prefill, two on cached prefixes
    for p, g in zip(prompts, got):
        _close(g, await plain.generate(p, GREEDY))


@pytest.mark.parametrize("change", ["optimizer step", "load_state_dict", "swap_weights"])
async def test_changed_weights_never_meet_the_old_keys_and_values(change):
    model = tiny_llama()
    backend = TransformersBackend(model, TOK)
    _, second, _ = await _two_turns(backend)
    assert len(backend.prefix) == 1
    new = {k: v + 0.5 * torch.randn_like(v) for k, v in tiny_llama(seed=1).state_dict().items()}
    if change == "optimizer step":
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(new[name])
    elif change == "load_state_dict":
        model.load_state_dict(new)
    else:
        await backend.swap_weights(new)
    fresh_model = tiny_llama()
    fresh_model.load_state_dict(new)
    want = await TransformersBackend(fresh_model, TOK, prefix_cache_bytes=0).generate(second, GREEDY)
    got = await backend.generate(second, GREEDY)
    _close(got, want)
    assert backend.prefix.hits == len(second) - 5  # the second turn's hit only: none after the change


async def test_release_caches_empties_it():
    backend = TransformersBackend(tiny_llama(), TOK)
    await _two_turns(backend)
    assert len(backend.prefix) and backend.prefix.nbytes > 0
    backend.release_caches()
    assert len(backend.prefix) == 0 and backend.prefix.nbytes == 0


async def test_a_session_pause_releases_the_back_ends_caches():
    """Training runs inside ``session.paused()``: the caches' memory is the trainer's then."""
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.runner.session import Session

    class Counting(ScriptedBackend):
        released = 0

        def release_caches(self) -> None:
            self.released += 1

    backend = Counting({"turns": [{"text": "hi"}]}, tokenizer=smollm2_tokenizer())
    async with Session(backend) as s, s.paused():
        assert backend.released == 1


def _kv(n: int, width: int = 2):
    return [(torch.zeros(1, width, n, 4), torch.zeros(1, width, n, 4)) for _ in range(2)]


def test_the_budget_evicts_the_least_recently_used_and_prefixes_are_not_kept_twice():
    per_token = sum(k.nbytes + v.nbytes for k, v in _kv(1))
    cache = PrefixCache(tiny_llama(), max_bytes=250 * per_token)
    cache.check_weights()  # as the back-end does at each admission, before anything is stored
    a, b, c = ([i] * 100 for i in (1, 2, 3))
    cache.store(a, _kv(100))
    cache.store(b, _kv(100))
    assert cache.lookup([*a, 0])[0] == 100  # a is now the most recently used
    cache.store(c, _kv(100))  # over budget: b goes
    assert len(cache) == 2 and cache.lookup([*b, 0]) == (0, None) and cache.nbytes == 200 * per_token
    cache.store(a[:50], _kv(50))  # a prefix of a cached sequence adds nothing
    assert len(cache) == 2 and cache.nbytes == 200 * per_token
    longer = a + [7] * 20
    cache.store(longer, _kv(120))  # a cached prefix of the new sequence is replaced by it
    assert len(cache) == 2 and cache.nbytes == 220 * per_token
    assert cache.lookup([*longer, 8])[0] == 120
    assert cache.lookup(longer)[0] == 119  # the prompt's last token always runs
    cache.store([5] * (MIN_PREFIX - 1), _kv(MIN_PREFIX - 1))  # too short to be worth it
    assert len(cache) == 2
    assert cache.lookup([*a[:MIN_PREFIX - 1], 0]) == (0, None)  # a match under MIN_PREFIX is no hit
