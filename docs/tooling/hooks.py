"""MkDocs hook: a page's ``<!-- generated: NAME -->`` line becomes the reference ``reference.GENERATORS[NAME]``
writes from the code, at every build, so the site's references cannot drift from it."""

from __future__ import annotations

import re
from typing import Any

import reference  # mkdocs puts this file's folder on sys.path while it loads the hook

_MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def generated(match: re.Match[str]) -> str:
        name = match[1]
        if name not in reference.GENERATORS:
            raise ValueError(f"{page.file.src_path}: no generator {name!r}; known: {sorted(reference.GENERATORS)}")
        return reference.GENERATORS[name]()

    return _MARKER.sub(generated, markdown)
