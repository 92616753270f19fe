"""The documentation's runnable blocks that need clusters, run against the suite's (``WEST`` and ``EAST``), as a
reader would run them: a page's blocks in order in one shell (a runbook's steps share its ``srm run``). A runbook
that stops working fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs.tooling import pages

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("page", sorted(pages.runbooks()))
def test_a_pages_runnable_blocks_run_against_the_clusters(page: str, clusters, tmp_path: Path) -> None:
    env = {"WEST": clusters["a"].bootstrap, "EAST": clusters["b"].bootstrap}
    done = pages.run(pages.runbooks()[page], tmp_path, env)
    logs = "".join(f"\n{log}:\n{log.read_text(errors='replace')[-3000:]}" for log in sorted(tmp_path.glob("*.log")))
    assert done.returncode == 0, f"{page}:\n{done.stdout}\n{done.stderr}{logs}"
