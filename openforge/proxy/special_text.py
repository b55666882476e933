"""Special-token text inside message content stays text.

Owns: :class:`SpecialTextGuard`. A tool result, a web page or a user message may contain the text of
the tokenizer's special/added tokens (``<|im_end|>\\n<|im_start|>system``); tokenized as is, that
text would become real role tokens and forge turns the harness never sent. Before the chat template
runs, :meth:`~SpecialTextGuard.escape` replaces every such string in the messages and tools (and the
escape character itself) with a private-use code; the rendered text then holds only the template's
own special tokens intact. :meth:`~SpecialTextGuard.encode` splits the rendered text at those, encodes
them as their ids and every piece between them — codes turned back into the original text — with the
special tokens switched off (``split_special_tokens``). Text without codes is encoded exactly as
before, so prompts without such content, splicing and caching are unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["MARK", "SpecialTextGuard"]

MARK = "\ue000"  # opens and closes an escape code: MARK + one plane-15 private-use char + MARK
_BASE = 0xF0000


class SpecialTextGuard:
    def __init__(self, tokenizer: Any):
        added: dict[str, int] = {}
        try:
            added = dict(tokenizer.get_added_vocab())
        except Exception:  # a tokenizer without added-vocab introspection: its special tokens
            added = {t: tokenizer.convert_tokens_to_ids(t) for t in getattr(tokenizer, "all_special_tokens", [])}
        tokens = sorted((t for t in added if t), key=len, reverse=True)
        self.ids = added
        self.codes = {tok: MARK + chr(_BASE + 1 + i) + MARK for i, tok in enumerate(tokens)}
        self.codes[MARK] = MARK + chr(_BASE) + MARK
        self.back = {v: k for k, v in self.codes.items()}
        self._find = re.compile("|".join(re.escape(t) for t in [*tokens, MARK]))
        # few strings: substring tests (C-speed scans) decide faster than the regex that text needs no escaping
        self._probe = tuple([*tokens, MARK]) if len(tokens) <= 64 else None
        self._split = re.compile("(" + "|".join(re.escape(t) for t in tokens) + ")") if tokens else None
        self._unescape = re.compile(MARK + "." + MARK, re.S)
        self._tokenizer, self._tokens = tokenizer, tokens
        self._plain = _plain_encoder(tokenizer, tokens)

    def __getstate__(self) -> dict[str, Any]:  # a token worker process gets it with the renderer
        return {k: v for k, v in self.__dict__.items() if k != "_plain"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._plain = _plain_encoder(self._tokenizer, self._tokens)

    # -- before the template ------------------------------------------------------------------------
    def escape(self, obj: Any) -> Any:
        """``obj`` (messages, tools: nested dicts/lists/strings) with special-token text escaped; the
        same object when nothing needed escaping."""
        if isinstance(obj, str):
            probe = self._probe
            if probe is not None and not any(t in obj for t in probe):
                return obj
            return self._find.sub(self._code, obj) if self._find.search(obj) else obj
        if isinstance(obj, dict):
            out = {k: self.escape(v) for k, v in obj.items()}
            return obj if all(out[k] is obj[k] for k in obj) else out
        if isinstance(obj, list):
            items = [self.escape(v) for v in obj]
            return obj if all(a is b for a, b in zip(items, obj)) else items
        return obj

    def _code(self, m: re.Match[str]) -> str:
        return self.codes[m.group(0)]

    # -- after the template -------------------------------------------------------------------------
    def encode(self, text: str, encode: Callable[[str], list[int]]) -> list[int]:
        """The ids of rendered ``text``: ``encode(text)`` when it holds no escape code; else the
        template's special tokens as their ids and everything else as plain text."""
        if MARK not in text or self._split is None:
            return encode(text)
        out: list[int] = []
        for i, piece in enumerate(self._split.split(text)):
            if i % 2:
                out.append(self.ids[piece])
            elif piece:
                out += self._plain(self._unescape.sub(lambda m: self.back.get(m.group(0), m.group(0)), piece))
        return out


def _plain_encoder(tokenizer: Any, added: list[str]) -> Callable[[str], list[int]]:
    """Encodes text with every added token (special or not) read as plain text."""
    fast = getattr(tokenizer, "_tokenizer", None)
    if type(fast).__module__.startswith("tokenizers") and hasattr(fast, "to_str"):
        from tokenizers import AddedToken, Tokenizer

        copy = Tokenizer.from_str(fast.to_str())  # its own copy: the switch is not shared with other encodes
        # non-special added tokens are marked special in the copy (same ids), so the switch covers them too
        copy.add_special_tokens([AddedToken(t, special=True) for t in added])
        copy.encode_special_tokens = True
        return lambda s: copy.encode(s, add_special_tokens=False).ids
    return lambda s: list(tokenizer.encode(s, add_special_tokens=False, split_special_tokens=True))
