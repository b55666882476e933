"""``kilocode``: the real Kilo Code CLI (npm ``@kilocode/cli``, a native binary forked from opencode)
against the proxy's OpenAI Chat Completions API.

Owns what differs from opencode (:class:`~openforge.harnesses.opencode.OpencodeFamilyHarness` does
the rest: the provider config, the ``$KILO_DISABLE_*`` offline switches, the argv ``kilo run --pure
--auto --format json -m openforge/M --dir WORKDIR TASK`` and the final answer, the text of the last
``text`` event): the config path ``kilo.json`` without a ``$schema``, the ``KILO_`` prefix, and the
switches of its own (no telemetry, session ingest, presence, codebase indexing, web UI or daemon).

Declarative data (for a harness spec): package ``@kilocode/cli`` (``versions.NPM_PINS["kilocode"]``,
executable ``kilo``), wire ``chat``, config file ``$HOME/.config/kilo/kilo.json`` named by
``$KILO_CONFIG``, base URL / key / model in that file.
"""

from __future__ import annotations

from .opencode import OpencodeFamilyHarness, opencode_config
from .versions import NPM_PINS

__all__ = ["KilocodeHarness", "kilocode_config"]

CONFIG_PATH = ".config/kilo/kilo.json"

#: kilo's switches beyond opencode's ``$<PREFIX>_DISABLE_*`` ones
EXTRA_OFFLINE_ENV = {
    "KILO_DISABLE_SESSION_INGEST": "1", "KILO_DISABLE_PRESENCE": "1", "KILO_DISABLE_CODEBASE_INDEXING": "1",
    "KILO_DISABLE_EMBEDDED_WEB_UI": "1", "KILO_NO_DAEMON": "1", "KILO_TELEMETRY_LEVEL": "off",
}


def kilocode_config(*, base_url: str, api_key: str, model: str, context_window: int = 128_000,
                    max_tokens: int = 4096) -> str:
    """``kilo.json``: opencode's config without its ``$schema``."""
    return opencode_config(base_url=base_url, api_key=api_key, model=model, context_window=context_window,
                           max_tokens=max_tokens, schema=None)


class KilocodeHarness(OpencodeFamilyHarness):
    name = "kilocode"
    executable = "kilo"
    install_hint = f"forge harness install kilocode  (npm install {NPM_PINS['kilocode'].spec})"
    env_prefix = "KILO"
    config_path = CONFIG_PATH
    extra_offline_env = EXTRA_OFFLINE_ENV
