"""A state directory of an older `srm run`: the tables of the retired DynamoDB Local store are never silently left
behind (srm.local.store.check_state_dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from srm.local.store import RetiredStoreError, check_state_dir


def test_state_dir_holding_dynamodb_local_tables_is_refused_with_how_to_migrate(tmp_path: Path):
    # GIVEN the tables --store durable kept (DynamoDB Local's SQLite file)
    data = tmp_path / ".srm-local" / "dynamodb"
    data.mkdir(parents=True)
    (data / "shared-local-instance.db").write_bytes(b"SQLite format 3\x00")

    # WHEN the directory is checked, THEN it is refused in one line: keep the tables (DynamoDB Local run by the user,
    # at --endpoint-url), or remove them
    with pytest.raises(RetiredStoreError) as refused:
        check_state_dir(tmp_path / ".srm-local")
    message = str(refused.value)
    assert "\n" not in message
    assert f"-dbPath {data.resolve()}" in message and "--endpoint-url http://127.0.0.1:8000" in message
    assert f"remove {data.resolve()}" in message
    assert refused.value.path == data.resolve()


@pytest.mark.parametrize("layout", ["none", "empty state dir", "empty dynamodb dir"])
def test_state_dir_without_dynamodb_local_tables_is_accepted(tmp_path: Path, layout: str):
    state_dir = tmp_path / ".srm-local"
    if layout != "none":
        state_dir.mkdir()
    if layout == "empty dynamodb dir":  # DynamoDB Local started, no table ever created: nothing to keep
        (state_dir / "dynamodb").mkdir()

    check_state_dir(state_dir)
