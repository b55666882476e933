"""ProxyServer's bounds as value objects (``ProxyLimits`` / ``ProxyTimeouts``), the old flat keywords
still accepted, a misspelt one still a TypeError."""

from __future__ import annotations

import pytest

from openforge.proxy import ProxyLimits, ProxyServer, ProxyTimeouts, ScriptedBackend
from openforge.proxy.bounds import resolve_bounds


def _server(tmp_path, **kw):
    return ProxyServer(ScriptedBackend({"turns": [{"text": "hi"}]}), agent_uds=str(tmp_path / "a.sock"), **kw)


def test_the_objects_set_the_bounds(tmp_path):
    s = _server(tmp_path, limits=ProxyLimits(max_body_bytes=1000, max_json_depth=5, max_header_bytes=2000),
                timeouts=ProxyTimeouts(header_s=1.5, body_s=2.5, finish_wait_s=3.5))
    assert (s.max_header_bytes, s.header_timeout_s, s.body_timeout_s) == (2000, 1.5, 2.5)
    assert s.recorder.finish_wait_s == 3.5


def test_old_flat_keywords_still_work_and_override_the_objects(tmp_path):
    s = _server(tmp_path, max_header_bytes=123, body_timeout_s=7.0, timeouts=ProxyTimeouts(header_s=1.0))
    assert (s.max_header_bytes, s.header_timeout_s, s.body_timeout_s) == (123, 1.0, 7.0)
    assert resolve_bounds(None, None, {}) == (ProxyLimits(), ProxyTimeouts())


def test_an_unknown_keyword_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="body_timeout"):
        _server(tmp_path, body_timeout=5)
