"""A prompt that cannot fit the policy's context is refused before it is tokenized when its bytes prove
it (a sound bound: tokens >= bytes / the most bytes one token covers), with the called API's own
overflow error — the same error the exact (tokenized) check gives — through the real SDKs."""

from __future__ import annotations

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.core.types import CallStatus
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.context_limit import max_token_bytes, min_tokens
from openforge.proxy.render import Renderer
from openforge.proxy.server import ProxyServer

PIECES = ["<|im_start|>", "<|im_end|>", "<tool_call>", "\n", " ", "  ", "\n" + " " * 80, "#" * 80, "=" * 65,
          "héllo", "日本語", "user", '{"a": 1}', "\t", "🙂", "x", "\x00", "\ufffd"]


def test_smollm2_bound_is_its_longest_token(tokenizer):
    m = max_token_bytes(tokenizer)
    assert m == 81  # "\n" + 80 spaces is one token
    r = Renderer(tokenizer)
    assert len(r.encode("\n" + " " * 80)) == 1


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return Renderer(tokenizer)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join) | st.text(max_size=200))
def test_no_text_encodes_to_fewer_tokens_than_the_bound(renderer, text):
    assert len(renderer.encode(text)) >= min_tokens(len(text.encode("utf-8")), renderer.max_token_bytes)


def _tokenizer(**parts):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model = parts.pop("model", None) or models.BPE(vocab={"a": 0, "b": 1, "ab": 2, "<unk>": 3}, merges=[("a", "b")],
                                                   unk_token="<unk>")
    tok = Tokenizer(model)
    tok.pre_tokenizer = parts.pop("pre", pre_tokenizers.ByteLevel(add_prefix_space=False))
    if "normalizer" in parts:
        tok.normalizer = parts.pop("normalizer")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    for added in parts.pop("added", []):
        fast.add_tokens([added])
    return fast


def test_pipelines_that_can_drop_or_shrink_text_get_no_bound():
    from tokenizers import AddedToken, models, normalizers, pre_tokenizers

    assert max_token_bytes(_tokenizer()) == 5  # "<unk>"
    assert max_token_bytes(_tokenizer(normalizer=normalizers.Prepend("▁"))) == 5
    assert max_token_bytes(_tokenizer(normalizer=normalizers.Strip())) is None  # whitespace vanishes
    assert max_token_bytes(_tokenizer(normalizer=normalizers.NFKC())) is None  # may shrink
    assert max_token_bytes(_tokenizer(pre=pre_tokenizers.Whitespace())) is None  # whitespace dropped
    assert max_token_bytes(_tokenizer(added=[AddedToken("<mask>", lstrip=True)])) is None  # eats spaces
    wordpiece = models.WordPiece(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]")  # a whole unknown word → one token
    assert max_token_bytes(_tokenizer(model=wordpiece, pre=pre_tokenizers.Metaspace())) is None
    assert max_token_bytes(object()) is None  # a slow (pure Python) tokenizer: no bound, tokenize as before


class Small(ScriptedBackend):
    max_context = 256


@pytest.fixture
async def small_proxy(tokenizer):
    async with ProxyServer(Small({"turns": ["x"]}, tokenizer=tokenizer), token_workers=0) as proxy:
        encoded: list[int] = []
        r = proxy.engine.renderer
        real = r.encode
        r.encode = lambda text: (encoded.append(len(text)), real(text))[1]
        yield proxy, encoded
        del r.encode


BIG = "lorem ipsum dolor " * 2000  # 36 000 bytes >= 256 tokens * 81 bytes: an overflow the bytes prove
EXACT = "word " * 300  # 1 500 bytes: the bytes prove nothing (< 256 * 81), the tokens do (~300)


async def test_openai_overflow_is_context_length_exceeded_without_tokenizing(small_proxy):
    proxy, encoded = small_proxy
    h = proxy.create_rollout("t")
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    errors = []
    for text in (BIG, EXACT):
        with pytest.raises(openai.BadRequestError) as e:
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        errors.append(e.value)
        if text is BIG:
            assert encoded == []  # refused before the prompt was tokenized
    for e in errors:  # both paths: the same OpenAI error
        assert e.status_code == 400 and e.code == "context_length_exceeded" and e.param == "messages"
        assert e.type == "invalid_request_error" and "maximum context length is 256 tokens" in e.message
    assert "counted from its" in errors[0].message and "counted from its" not in errors[1].message
    assert max(encoded) > len(EXACT)  # the exact path did tokenize
    with pytest.raises(openai.BadRequestError) as e:  # the Responses API: the same error, its own param
        await c.responses.create(model="m", input=BIG)
    assert e.value.code == "context_length_exceeded" and e.value.param == "input"
    _recorded_as_overflows(proxy, h, untokenized=[True, False, True])


async def test_anthropic_overflow_is_prompt_too_long_without_tokenizing(small_proxy):
    proxy, encoded = small_proxy
    h = proxy.create_rollout("t")
    c = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
    bodies = []
    for text in (BIG, EXACT):
        with pytest.raises(anthropic.BadRequestError) as e:
            await c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": text}])
        assert e.value.status_code == 400
        bodies.append(e.value.body["error"])
        if text is BIG:
            assert encoded == []
    for err in bodies:
        assert err["type"] == "invalid_request_error"
        assert err["message"].startswith("prompt is too long: ") and " tokens > 256 maximum" in err["message"]
    least = int(bodies[0]["message"].split(": ")[1].split()[0])
    assert least == min_tokens(len(proxy.renderer.text([{"role": "user", "content": BIG}], None).encode()), 81)
    _recorded_as_overflows(proxy, h, untokenized=[True, False])


def _recorded_as_overflows(proxy, h, *, untokenized: list[bool]) -> None:
    """Each refusal is a recorded ``context_overflow`` call (the policy's doing: the outcome rule makes
    the rollout a trained failure), with its prompt ids only where they were counted."""
    calls = proxy.get_trajectory(h.rollout_id).calls
    assert [c.status for c in calls] == [CallStatus.CONTEXT_OVERFLOW] * len(untokenized)
    assert [not c.prompt_ids for c in calls] == untokenized and not any(c.output_ids for c in calls)
