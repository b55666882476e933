"""MkDocs hooks of the docs site (mkdocs.yml `hooks:`): links from a page to a file of the repository
outside docs/ (``../examples/tasks``, ``../openforge/proxy/``) are checked and made absolute.

A page may link to the repository's own files, as they read on GitHub. MkDocs cannot serve them, so each
such link must name a file or folder that exists (else a warning, which `mkdocs build --strict` turns into
a failure) and is rewritten to ``<repo_url>/blob/main/<path>`` when ``repo_url`` is set in mkdocs.yml,
else to the path as code.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

log = logging.getLogger("mkdocs.plugins.openforge")
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)#\s]+)(?P<anchor>#[^)\s]*)?\)")


def on_page_markdown(markdown, page, config, files):
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    page_dir = (docs / page.file.src_uri).parent
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def fix(m: re.Match) -> str:
        target = m["target"]
        if "://" in target or target.startswith("mailto:"):
            return m[0]
        path = Path(posixpath.normpath(page_dir / target))
        if path.is_relative_to(docs):
            return m[0]
        if not path.is_relative_to(root) or not path.exists():
            log.warning("%s links to %s, which is not a file of the repository", page.file.src_uri, target)
            return m[0]
        rel = path.relative_to(root).as_posix()
        if repo_url:
            return f"[{m['text']}]({repo_url}/blob/main/{rel})"
        return m["text"] if m["text"].startswith("`") else f"{m['text']} (`{rel}`)"

    return LINK.sub(fix, markdown)
