"""The two kinds of back-end: each has one abstract method, a class of neither kind cannot be built,
and the kind alone decides how the proxy serves and records a call (real openai SDK against the proxy)."""

from __future__ import annotations

import openai
import pytest

from openforge.proxy.backends.base import (
    Backend,
    GenContext,
    Generation,
    MessageBackend,
    SamplingParams,
    TextCompletion,
    TokenBackend,
)
from openforge.proxy.server import ProxyServer


def _with_tokenizer(tok):
    """A ``tokenizer`` property returning ``tok`` (a class body cannot read a same-named outer local)."""
    return property(lambda self: tok)


def test_a_backend_of_neither_kind_cannot_be_instantiated(tokenizer):
    tok = tokenizer

    class Neither(Backend):  # has everything Backend asks for, but neither generate nor complete
        tokenizer = _with_tokenizer(tok)

    with pytest.raises(TypeError, match=r"TokenBackend .*generate.*MessageBackend .*complete"):
        Neither()


def test_old_style_backend_with_generate_is_told_to_pick_a_kind(tokenizer):
    tok = tokenizer

    class OldStyle(Backend):
        tokenizer = _with_tokenizer(tok)

        async def generate(self, prompt_ids, params, ctx=None):
            return Generation([1], [0.0])

    with pytest.raises(TypeError, match="subclasses TokenBackend"):
        OldStyle()


@pytest.mark.parametrize(("kind", "method"), [(TokenBackend, "generate"), (MessageBackend, "complete")])
def test_each_kind_has_its_one_abstract_method(tokenizer, kind, method):
    tok = tokenizer

    class Missing(kind):
        tokenizer = _with_tokenizer(tok)

    with pytest.raises(TypeError, match=f"abstract method.*{method}"):
        Missing()
    assert kind.__abstractmethods__ == {"tokenizer", method}


def test_passthrough_comes_from_the_kind():
    with pytest.raises(TypeError, match="subclass MessageBackend"):
        class Confused(TokenBackend):  # the class statement itself is refused
            passthrough = True
    assert TokenBackend.passthrough is False and MessageBackend.passthrough is True
    assert TokenBackend.exact is True and MessageBackend.exact is False


class _Tokens(TokenBackend):
    name = "tokens"

    def __init__(self, tok):
        self._tok = tok

    @property
    def tokenizer(self):
        return self._tok

    async def generate(self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None):
        ids = [*self._tok.encode("four", add_special_tokens=False), self._tok.convert_tokens_to_ids("<|im_end|>")]
        return Generation(ids, [-0.5] * len(ids))


class _Messages(MessageBackend):
    name = "messages"

    def __init__(self, tok):
        self._tok = tok
        self.seen: list[str] = []

    @property
    def tokenizer(self):
        return self._tok

    async def complete(self, request, params: SamplingParams, ctx: GenContext | None = None) -> TextCompletion:
        self.seen.append(request.messages[-1]["content"])
        return TextCompletion(text="four")


@pytest.mark.parametrize("kind", ["tokens", "messages"])
async def test_the_kind_decides_how_a_call_is_served_and_recorded(tokenizer, kind):
    backend = _Tokens(tokenizer) if kind == "tokens" else _Messages(tokenizer)
    async with ProxyServer(backend, admin_token="adm") as proxy:
        h = proxy.create_rollout("t")
        async with openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0) as client:
            r = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}])
        traj = await proxy.afinish_rollout(h.rollout_id, reward=1.0)
    assert r.choices[0].message.content == "four"
    (call,) = traj.calls
    if kind == "tokens":  # token-in/token-out: the sampler's ids and logprobs, exact
        assert call.exact and call.output_logprobs == [-0.5] * len(call.output_ids)
    else:  # pass-through: the request went through as messages; the ids are encoded after the fact
        assert backend.seen == ["2+2?"]
        assert not call.exact and call.output_ids and not call.output_logprobs
