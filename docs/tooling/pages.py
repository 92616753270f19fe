"""The hand-written pages as the drift tests read them: their text without generated parts, the names they give in
backquotes, their runnable blocks and their copies of example files.

A block runs in the suite when the line before it is ``<!-- runnable -->`` (``<!-- runnable: clusters -->``: it needs
two clusters, ``WEST`` and ``EAST``); a block preceded by ``<!-- same as: PATH -->`` must equal that file. Both marks
are HTML comments, so a repository host and the site show neither. A page's blocks that need clusters run in order in
one shell, as a reader follows a runbook step by step: a block uses what an earlier one started (``srm run``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FRONT_DOOR = ROOT / "README.md"

__all__ = ["Block", "code_spans", "copied_blocks", "pages", "run", "runbooks", "runnable_blocks"]

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_MARKED = re.compile(
    r"^<!-- (runnable(?:: (?P<needs>\w+))?|same as: (?P<path>\S+)) -->\n```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.MULTILINE | re.DOTALL,
)
_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int
    body: str
    needs: str | None = None  # runnable: what it needs besides the venv ("clusters")
    path: str | None = None  # a copy: the file it copies

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def pages(*, front_door: bool = True) -> dict[str, str]:
    """Every hand-written page (and the front door) by path: generated parts are only markers in them."""
    found = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))}
    if front_door and FRONT_DOOR.exists():
        found[FRONT_DOOR.name] = FRONT_DOOR.read_text(encoding="utf-8")
    return found


def code_spans(text: str) -> Iterator[str]:
    """What a page gives in backquotes: inline spans, and each line of its code blocks."""
    for block in _FENCE.findall(text):
        yield from block.splitlines()
    yield from _SPAN.findall(_FENCE.sub("", text))


def _marked() -> Iterator[tuple[str, re.Match[str]]]:
    for page, text in pages().items():
        for match in _MARKED.finditer(text):
            yield page, match


def _line(page: str, match: re.Match[str]) -> int:
    return pages()[page].count("\n", 0, match.start()) + 1


def runnable_blocks() -> list[Block]:
    return [
        Block(page, _line(page, m), m["body"], needs=m["needs"]) for page, m in _marked() if m[1].startswith("runnable")
    ]


def runbooks() -> dict[str, list[Block]]:
    """The blocks that need clusters, by page, in the page's order: each page's run as one script."""
    found: dict[str, list[Block]] = {}
    for block in runnable_blocks():
        if block.needs == "clusters":
            found.setdefault(block.page, []).append(block)
    return found


def copied_blocks() -> list[Block]:
    return [Block(page, _line(page, m), m["body"], path=m["path"]) for page, m in _marked() if m["path"]]


def run(
    blocks: Block | list[Block], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Runnable blocks, in order, as one script in bash (-e, -u, pipefail) in ``cwd``, where ``docs/`` is the
    repository's (the blocks name its example files), with this Python's venv first on PATH (``srm``,
    ``srm-control``, ``python``). Each block is announced on stderr (where a failure is). Whatever the script left
    running in the background (a failed runbook's ``srm run``) is stopped with it: the script has a process group of
    its own."""
    (cwd / "docs").symlink_to(DOCS)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    script = "".join(f"echo '## {b}' >&2\n{b.body}" for b in ([blocks] if isinstance(blocks, Block) else blocks))
    with subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, "PATH": path, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):  # nothing of it left
                os.killpg(process.pid, signal.SIGKILL)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
