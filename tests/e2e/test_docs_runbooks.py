"""The documentation's runnable blocks that need clusters, run against the suite's (``WEST`` and ``EAST``), as a
reader would run them: a runbook that stops working fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs.tooling import pages

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("block", [b for b in pages.runnable_blocks() if b.needs == "clusters"], ids=str)
def test_a_runnable_block_runs_against_the_clusters(block: pages.Block, clusters, tmp_path: Path) -> None:
    env = {"WEST": clusters["a"].bootstrap, "EAST": clusters["b"].bootstrap}
    done = pages.run(block, tmp_path, env)
    assert done.returncode == 0, f"{block}:\n{done.stdout}\n{done.stderr}"
