"""A tokenizer for serving without a model: the cached fast tokenizer, loaded without transformers.

Owns: :class:`LightTokenizer` (the part of a Hugging Face tokenizer the proxy's
:class:`~openforge.proxy.render.Renderer` uses — ``encode``, ``decode``, ``apply_chat_template``,
the special tokens — over the Rust ``tokenizers.Tokenizer`` of a saved ``tokenizer.json``, with
chat templates rendered by a jinja2 sandbox set up exactly like transformers' own) and
:func:`load_light_tokenizer`.

Why: ``import transformers`` pulls in torch and took ~4 s of a ~6.6 s scripted ``forge rollout``
(the scripted, vLLM and OpenAI back-ends need ids, never the model). The ids and rendered text are
the same as the transformers tokenizer's (``tests/proxy/test_light_tokenizer.py`` compares them), so a
scripted teacher's recording trains the same tokens the model back-end would render.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["LightTokenizer", "load_light_tokenizer"]

_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    """transformers' chat-template environment (``chat_template_utils._cached_compile_jinja_template``)
    minus the ``{% generation %}`` tracker, which rendering without an assistant mask never uses."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)


class LightTokenizer:
    """A saved fast tokenizer (``tokenizer.json`` + ``tokenizer_config.json`` [+ ``chat_template.jinja``])."""

    def __init__(self, directory: str | Path):
        import tokenizers

        d = Path(directory)
        self._tokenizer = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        self.special_tokens_map: dict[str, str] = {k: _content(cfg[k]) for k in _SPECIAL if cfg.get(k) is not None}
        template = d / "chat_template.jinja"
        self.chat_template: str | None = template.read_text() if template.is_file() else cfg.get("chat_template")
        self.name_or_path = str(d)
        vocab = self._tokenizer.get_vocab(with_added_tokens=True)
        if self.eos_token != "<|im_end|>" and "<|im_end|>" in vocab:  # as load_tokenizer's _fix_chatml
            self.special_tokens_map["eos_token"] = self.special_tokens_map["pad_token"] = "<|im_end|>"

    # -- special tokens -----------------------------------------------------------------------
    def _id(self, key: str) -> int | None:
        tok = self.special_tokens_map.get(key)
        return None if tok is None else self._tokenizer.token_to_id(tok)

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens_map.get("eos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._id("pad_token")

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    # -- ids and text -------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                            chat_template: str | None = None, add_generation_prompt: bool = False,
                            tokenize: bool = True, **kwargs: Any) -> str | list[int]:
        template = chat_template or self.chat_template
        if template is None:
            raise ValueError(f"{self.name_or_path}: no chat template")
        text = _compile(template).render(messages=messages, tools=tools, documents=None,
                                         add_generation_prompt=add_generation_prompt,
                                         **{**self.special_tokens_map, **kwargs})
        return self.encode(text, add_special_tokens=False) if tokenize else text


def _content(token: Any) -> str:
    return str(token["content"]) if isinstance(token, dict) else str(token)


def load_light_tokenizer(name_or_path: str = "smollm2-135m") -> Any:
    """SmolLM2's tokenizer as a :class:`LightTokenizer` once its cache exists (the first call, or any
    other model, gets the transformers tokenizer: a model-specific tokenizer may post-process in
    Python, which only transformers reproduces)."""
    from .backends.hf_loading import _CACHE_NAME, SMOLLM2_ALIASES, cache_dir, load_tokenizer

    d = cache_dir() / _CACHE_NAME
    if name_or_path.lower() in SMOLLM2_ALIASES and (d / "tokenizer.json").is_file() \
            and (d / "tokenizer_config.json").is_file():
        return LightTokenizer(d)
    return load_tokenizer(name_or_path)
