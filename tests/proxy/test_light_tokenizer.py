"""The light tokenizer (no transformers import) renders and tokenizes exactly like transformers'."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openforge.harnesses.react import SYSTEM_PROMPT, TOOLS
from openforge.proxy.backends.transformers import load_tokenizer
from openforge.proxy.light_tokenizer import LightTokenizer, load_light_tokenizer
from openforge.proxy.render import Renderer

CALL = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"command": "ls -la"}'}}
CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Create hello.txt with hi."}],
    [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "List files."},
     {"role": "assistant", "content": "", "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "c1", "content": "exit code 0\ntotal 0\n<b>&amp; é 漢字 🙂"},
     {"role": "assistant", "content": "<think>done?</think>Done."}],
    [{"role": "developer", "content": "  spaces  \n\n"}, {"role": "user", "content": "x" * 300 + " \t\r\n end"}],
]


@pytest.fixture(scope="module")
def pair():
    heavy = load_tokenizer("smollm2-135m")  # also makes sure the cache the light one reads exists
    light = load_light_tokenizer("smollm2-135m")
    assert isinstance(light, LightTokenizer)
    return heavy, light


@pytest.mark.parametrize("conv", CONVERSATIONS)
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_same_text_and_ids_as_transformers(pair, conv, tools):
    heavy, light = (Renderer(t) for t in pair)
    for gen in (True, False):
        assert light.text(conv, tools, gen=gen) == heavy.text(conv, tools, gen=gen)
    assert light.render(conv, tools).ids == heavy.render(conv, tools).ids
    assert light.system_prefix_len(conv, tools) == heavy.system_prefix_len(conv, tools)
    own = pair[0].apply_chat_template(conv, tokenize=False, add_generation_prompt=True)  # the model's own template
    assert pair[1].apply_chat_template(conv, tokenize=False, add_generation_prompt=True) == own


def test_special_tokens_encode_decode_match(pair):
    heavy, light = pair
    assert (light.eos_token, light.eos_token_id, light.pad_token_id) == (heavy.eos_token, heavy.eos_token_id,
                                                                         heavy.pad_token_id)
    text = "<|im_start|>user\nhé  llo\t漢字 🙂<tool_call>{}</tool_call><|im_end|>\n"
    ids = light.encode(text, add_special_tokens=False)
    assert ids == list(heavy.encode(text, add_special_tokens=False))
    assert light.decode(ids) == heavy.decode(ids, skip_special_tokens=False) == text
    assert light.get_vocab() == heavy.get_vocab()


def test_the_scripted_backend_does_not_import_transformers(pair):
    code = ("import sys; from openforge.proxy.backends.scripted import ScriptedBackend; from openforge.proxy.render "
            "import Renderer; b = ScriptedBackend({'turns': [{'text': 'hi'}]}); Renderer(b.tokenizer).render("
            "[{'role': 'user', 'content': 'hi'}], None); print(sorted(m for m in ('transformers', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
