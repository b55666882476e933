"""Renderer: Hermes template, parser round-trip, system_prefix_len, history splicing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.proxy.render import Head, HermesParser, Renderer

from .conftest import TOOLS


def test_template_renders_tools_and_tool_turns(tokenizer):
    r = Renderer(tokenizer)
    msgs = [
        {"role": "system", "content": "You are X."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]},
        {"role": "tool", "content": "out1", "tool_call_id": "a"},
        {"role": "tool", "content": "out2", "tool_call_id": "b"},
        {"role": "system", "content": "mid"},
    ]
    text = r.text(msgs, TOOLS)
    assert text.startswith("<|im_start|>system\nYou are X.\n\n# Tools")
    assert '"name": "bash"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>\n' in text
    assert "<|im_start|>user\n<tool_response>\nout1\n</tool_response>\n<tool_response>\nout2\n</tool_response><|im_end|>\n" in text
    assert "<|im_start|>system\nmid<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_format_output_matches_template_rendering(tokenizer):
    """What the scripted policy emits is byte-identical to how the template renders that turn."""
    r = Renderer(tokenizer)
    user = [{"role": "user", "content": "q"}]
    for text, reasoning, calls in [("hello", None, []), ("", None, [("bash", {"command": "ls"})]),
                                   ("ok", "think hard", [("bash", {"command": "a"}), ("bash", {"command": "b"})])]:
        msg = {"role": "assistant", "content": text}
        if reasoning:
            msg["reasoning_content"] = reasoning
        if calls:
            msg["tool_calls"] = [{"id": "x", "type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
        full = r.text([*user, msg], TOOLS, gen=False)
        prompt = r.text(user, TOOLS)
        assert full == prompt + r.format_output(text, reasoning, calls) + "\n"
        parsed = HermesParser().parse(r.format_output(text, reasoning, calls)[: -len(r.eos_text)])
        assert parsed.text == text and parsed.reasoning == reasoning
        assert [(t.name, t.args_dict()) for t in parsed.tool_calls] == calls


def test_parser_keeps_malformed_calls_as_text():
    p = HermesParser().parse('hi <tool_call>{"name": broken</tool_call>')
    assert p.tool_calls == [] and "broken" in p.text


def test_system_prefix_len(tokenizer):
    r = Renderer(tokenizer)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]
    n = r.system_prefix_len(msgs, TOOLS)
    ids = r.encode_rendered(r.text(msgs, TOOLS))
    assert 0 < n < len(ids)
    assert r.decode(ids[:n]).endswith("<|im_end|>\n")
    assert r.system_prefix_len([{"role": "user", "content": "u"}], None) == 0
    k = r.system_prefix_len([{"role": "user", "content": "u"}], TOOLS)
    assert r.decode(r.encode_rendered(r.text([{"role": "user", "content": "u"}], TOOLS))[:k]).endswith("</tool_call><|im_end|>\n")


def test_splice_reuses_exact_tokens_and_ignores_tool_call_ids(tokenizer):
    r = Renderer(tokenizer)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]
    prompt = r.encode_rendered(r.text(msgs, TOOLS))
    gen_text = r.format_output("", None, [("bash", {"command": "ls"})])
    # Tokenize the generation in an unusual way (char by char for the JSON) to prove it is not re-tokenized.
    out = r.encode("<tool_call>\n") + [i for ch in gen_text[len("<tool_call>\n"):-len(r.eos_text)] for i in r.encode(ch)]
    out += [r.eos_id]
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}
    head = Head(messages=[*msgs, assistant], tools_key=r.tools_key(TOOLS), ids=prompt + out, ended_with_eos=True,
                system_prefix_len=7)
    echoed = {**assistant, "tool_calls": [{**assistant["tool_calls"][0], "id": "call1"}]}  # OpenClaw rewrote the id
    nxt = [*msgs, echoed, {"role": "tool", "content": "file.txt", "tool_call_id": "call1"}]
    rendered = r.render(nxt, TOOLS, [head])
    assert rendered.spliced and rendered.system_prefix_len == 7
    assert rendered.ids[: len(head.ids)] == head.ids
    assert r.decode(rendered.ids) == r.text(nxt, TOOLS)  # same text, exact tokens kept
    # A changed history does not splice.
    changed = [*msgs, {**assistant, "content": "edited"}, nxt[-1]]
    assert not r.render(changed, TOOLS, [head]).spliced


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["<|im_start|>", "<|im_end|>", "<tool_call>", "\n", " ", "  ", "héllo", "日本語",
                                 "user", "{\"a\": 1}", "\t", "🙂", "<think>", "x"]), max_size=12).map("".join)
       | st.text(max_size=40))
def test_fast_encode_matches_the_tokenizer(tokenizer, renderer, text):
    """Renderer.encode calls the Rust tokenizer directly; the ids are the transformers wrapper's."""
    r = renderer
    assert r._fast is not None
    assert r.encode(text) == list(tokenizer.encode(text, add_special_tokens=False))
