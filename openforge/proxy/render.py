"""Rendering the canonical conversation to prompt token ids, parsing generated ids back, and history
splicing.

Owns: :class:`Renderer` (chat template → ids, ``system_prefix_len``, splicing onto the previous
call's exact tokens), :class:`HermesParser` (``<think>`` reasoning + ``<tool_call>{json}</tool_call>``),
:data:`PARSERS`, :func:`hermes_template`.

The template is the tokenizer's own when it renders tools, else the bundled Hermes/ChatML template
(``templates/hermes.jinja``), which fits SmolLM2 and the Qwen/Hermes families.

**Splicing.** When a request's history is a previous call's conversation plus the assistant turn we
generated for it (compared on roles, text, reasoning and tool-call names/arguments — tool-call ids are
ignored because harnesses rewrite them), the prompt is that call's exact ``prompt_ids + output_ids`` followed
by the tokens of only the newly rendered text. The policy's own tokens are never re-tokenized, so a
multi-turn rollout becomes one segment. Otherwise the request is rendered in full and
``build_segments`` classifies the break.

**Special-token text** in content (``<|im_end|>`` in a tool result) is tokenized as plain text: the
template renders escaped content (:class:`~openforge.proxy.special_text.SpecialTextGuard`) and
:meth:`Renderer.encode_rendered` encodes it; only the template's own special tokens become special ids.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from .canonical import ToolCallOut, new_id
from .context_limit import PromptTooLong, max_token_bytes, min_tokens
from .special_text import SpecialTextGuard

__all__ = ["PARSERS", "Head", "HermesParser", "Parsed", "Rendered", "Renderer", "hermes_template"]


@lru_cache(maxsize=1)
def hermes_template() -> str:
    return resources.files(__package__).joinpath("templates/hermes.jinja").read_text()


@dataclass
class Parsed:
    text: str
    reasoning: str | None
    tool_calls: list[ToolCallOut]


class HermesParser:
    """``<think>…</think>`` reasoning, ``<tool_call>{"name", "arguments"}</tool_call>`` tool calls,
    the rest is text. A malformed tool call stays text (the policy's mistake, visible to the harness)."""

    name = "hermes"
    _think = re.compile(r"^\s*<think>(.*?)(?:</think>|$)\s*", re.S)
    _call = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)

    def parse(self, text: str) -> Parsed:
        reasoning = None
        m = self._think.match(text)
        if m:
            reasoning = m.group(1).strip()
            text = text[m.end():]
        calls: list[ToolCallOut] = []
        kept: list[str] = []
        pos = 0
        for m in self._call.finditer(text):
            try:
                obj = json.loads(m.group(1))
            except ValueError:
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                continue
            args = obj.get("arguments", obj.get("parameters", {}))
            args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append(ToolCallOut(id=new_id("call_"), name=obj["name"], arguments=args_text))
            kept.append(text[pos:m.start()])
            pos = m.end()
        kept.append(text[pos:])
        return Parsed(text="".join(kept).strip(), reasoning=reasoning or None, tool_calls=calls)

    def forced_prefix(self, name: str) -> str:
        """Generation prefix that forces a tool call (``name == ""``: any tool). The prefix goes into
        the prompt (context, mask 0); the policy generates the rest of the call."""
        if not name:
            return '<tool_call>\n{"name": "'
        return '<tool_call>\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '

    def format(self, text: str, reasoning: str | None, tool_calls: list[tuple[str, Any]]) -> str:
        """The text a model would generate for this turn (inverse of :meth:`parse`), in the exact
        layout the template renders an assistant turn, without the end-of-turn token."""
        out = ""
        if reasoning:
            out += f"<think>\n{reasoning}\n</think>\n\n"
        out += text or ""
        for i, (name, args) in enumerate(tool_calls):
            if text or i:
                out += "\n"
            out += "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"
        return out


PARSERS: dict[str, type[HermesParser]] = {"hermes": HermesParser}


@dataclass
class Rendered:
    ids: list[int]
    system_prefix_len: int
    spliced: bool = False
    head: int = -1  # render_new: the index of the head spliced onto (its ids not yet prepended)


@dataclass
class Head:
    """The end of one lineage: the conversation served so far and its exact tokens."""

    messages: list[dict[str, Any]]
    tools_key: str
    ids: list[int]
    ended_with_eos: bool
    system_prefix_len: int


def _norm_msg(m: dict[str, Any]) -> tuple:
    calls = tuple(
        (tc.get("function", {}).get("name"), json.dumps(tc.get("function", {}).get("arguments"), sort_keys=True))
        for tc in m.get("tool_calls") or ()
    )
    # Reasoning counts: a harness that drops our <think> text did not send the conversation we
    # generated, so it is rendered as sent (build_segments then says `thinking_stripped`).
    return (m.get("role"), (m.get("content") or "").strip(), calls, (m.get("reasoning_content") or "").strip())


class Renderer:
    """Chat template + tokenizer + output parser for one policy model."""

    def __init__(self, tokenizer: Any, *, template: str | None = None, parser: str = "hermes"):
        self.tokenizer = tokenizer
        own = getattr(tokenizer, "chat_template", None)
        if template is None:
            template = own if isinstance(own, str) and "tools" in own else hermes_template()
        self.template = template
        self.parser = PARSERS[parser]()
        self.eos_text: str = tokenizer.eos_token or ""
        self.eos_id: int | None = tokenizer.eos_token_id
        self._prefix_cache: dict[str, int] = {}
        self.guard = SpecialTextGuard(tokenizer)
        self._max_bytes: int | None = 0  # 0: not derived yet
        fast = getattr(tokenizer, "_tokenizer", None)
        self._fast = fast if type(fast).__module__.startswith("tokenizers") and hasattr(fast, "encode") else None

    def __getstate__(self) -> dict[str, Any]:
        """What a token worker process receives: the tokenizer, template and parser, without caches or
        instance-level replacements of methods (wrappers set on this one object, e.g. by a test)."""
        state = {k: v for k, v in self.__dict__.items() if not (callable(v) and hasattr(type(self), k))}
        state["_prefix_cache"] = {}
        return state

    # -- text/ids ------------------------------------------------------------------------------
    def text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, gen: bool = True) -> str:
        """The rendered conversation, special-token text in content escaped: encode it with
        :meth:`encode_rendered`."""
        g = self.guard
        return self.tokenizer.apply_chat_template(
            g.escape(messages), tools=g.escape(tools) or None, chat_template=self.template,
            add_generation_prompt=gen, tokenize=False,
        )

    def encode_rendered(self, text: str) -> list[int]:
        """The ids of :meth:`text` output: content's special-token text stays plain text."""
        return self.guard.encode(text, self.encode)

    def encode(self, text: str) -> list[int]:
        fast = self._fast
        if fast is not None:  # the Rust tokenizer itself: the same ids without transformers' per-call wrapping
            return fast.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    @staticmethod
    def tools_key(tools: list[dict[str, Any]] | None) -> str:
        return json.dumps(tools or [], sort_keys=True)

    def system_prefix_len(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        lead = []
        for m in messages:
            if m.get("role") not in ("system", "developer"):
                break
            lead.append(m)
        if not lead and not tools:
            return 0
        key = self.tools_key(tools) + json.dumps(lead, sort_keys=True, default=str)
        n = self._prefix_cache.get(key)
        if n is None:
            n = self._system_prefix_len(lead, tools)
            self._prefix_cache[key] = n
            if len(self._prefix_cache) > 256:
                del self._prefix_cache[next(iter(self._prefix_cache))]
        return n

    def _system_prefix_len(self, lead: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        if not lead:  # templates put the tools in a system turn of their own: measure it
            probe = [{"role": "user", "content": "x"}]
            with_tools, without = self.text(probe, tools, gen=False), self.text(probe, None, gen=False)
            if not with_tools.endswith(without):
                return 0
            return len(self.encode_rendered(with_tools[: len(with_tools) - len(without)]))
        return len(self.encode_rendered(self.text(lead, tools, gen=False)))

    @property
    def max_token_bytes(self) -> int | None:
        """The most input bytes one token covers (None: no sound byte bound for this tokenizer)."""
        if self._max_bytes == 0:
            self._max_bytes = max_token_bytes(self.tokenizer)
        return self._max_bytes

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               heads: list[Head] | None = None, *, limit: int | None = None) -> Rendered:
        """The prompt ids of ``messages``: spliced onto the latest head it continues, else rendered in full.
        With ``limit``, raises :class:`PromptTooLong` when the prompt's bytes alone prove it has
        ``limit`` tokens or more (before tokenizing it)."""
        heads = list(heads or ())
        return self.join(self.render_new(messages, tools, [(h, len(h.ids)) for h in heads], limit=limit), heads)

    @staticmethod
    def join(rendered: Rendered, heads: list[Head]) -> Rendered:
        """Prepend the ids of the head :meth:`render_new` spliced onto (``heads`` as given to it)."""
        if rendered.head >= 0:
            rendered.ids = heads[rendered.head].ids + rendered.ids
        return rendered

    def render_new(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   heads: list[tuple[Head, int]], *, limit: int | None = None) -> Rendered:
        """:meth:`render` without the spliced head's own ids: ``heads`` are ``(head, its number of ids)``
        (``head.ids`` is not read, so a worker process need not receive it); a spliced result holds only
        the new ids and the index of its head (:meth:`join` completes it)."""
        for i in range(len(heads) - 1, -1, -1):
            head, n_head = heads[i]
            text = self._splice_text(head, messages, tools)
            if text is not None:
                self._bound(text, n_head, limit)
                return Rendered(self.encode_rendered(text), head.system_prefix_len, spliced=True, head=i)
        text = self.text(messages, tools)
        self._bound(text, 0, limit)
        return Rendered(self.encode_rendered(text), self.system_prefix_len(messages, tools))

    def _bound(self, text: str, n_before: int, limit: int | None) -> None:
        m = self.max_token_bytes if limit else None
        if m is None or limit is None or n_before + min_tokens(4 * len(text), m) < limit:
            return  # cannot prove an overflow even at 4 bytes per character: skip counting the bytes
        n_bytes = len(text.encode("utf-8"))
        least = n_before + min_tokens(n_bytes, m)
        if least >= limit:
            raise PromptTooLong(least, n_bytes)

    def splice(self, head: Head, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int] | None:
        text = self._splice_text(head, messages, tools)
        return None if text is None else head.ids + self.encode_rendered(text)

    def _splice_text(self, head: Head, messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]] | None) -> str | None:
        """The text to encode after ``head``'s ids when ``messages`` continue its conversation, else None."""
        k = len(head.messages)
        if len(messages) <= k or self.tools_key(tools) != head.tools_key:
            return None
        if any(_norm_msg(a) != _norm_msg(b) for a, b in zip(messages[:k], head.messages)):
            return None
        full = self.text(messages, tools)
        prefix = self.text(head.messages, tools, gen=False)
        if not full.startswith(prefix) or not self.eos_text:
            return None  # template not prefix-stable (e.g. strips past reasoning): render in full
        i = prefix.rfind(self.eos_text)
        if i < 0 or prefix[i + len(self.eos_text):].strip():
            return None
        tail = prefix[i + len(self.eos_text):] if head.ended_with_eos else prefix[i:]
        return tail + full[len(prefix):]

    # -- output ----------------------------------------------------------------------------------
    def parse(self, output_ids: list[int], prefix: str = "") -> Parsed:
        ids = output_ids
        if ids and self.eos_id is not None and ids[-1] == self.eos_id:
            ids = ids[:-1]
        return self.parser.parse(prefix + self.decode(ids))

    def format_output(self, text: str, reasoning: str | None, tool_calls: list[tuple[str, Any]]) -> str:
        return self.parser.format(text, reasoning, tool_calls) + self.eos_text
