"""The state table of a running `srm run` (its local store's URL is in ``.srm-local/store.url`` of its workdir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3

from srm.aws.state import StateStore


def state_client(workdir: Path) -> Any:
    """A DynamoDB client of the store of the `srm run` in ``workdir``."""
    url = (workdir / ".srm-local" / "store.url").read_text().strip()
    return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)


def state_store(workdir: Path, table: str = "srm-state") -> StateStore:
    return StateStore(state_client(workdir), table)
