"""The durable local store (DynamoDB Local): acknowledged writes survive a crash of the process that ran it, no store
outlives that process, and one state directory serves one `srm run` at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import boto3
import pytest

from srm.aws.state import DynamoDBState, create_state_table
from srm.core.offsets import Run
from srm.local.store import LocalStore, StoreError
from srm.state import StateStore
from tests.support.kafka import wait_for
from tests.support.runtime import child_pids, pid_alive

OWNER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import boto3
    from srm.local.store import LocalStore
    from srm.core.offsets import Run
    from srm.aws.state import DynamoDBState, create_state_table
    from srm.state import StateStore

    store = LocalStore(state_dir=Path(sys.argv[1]))
    url = store.start()
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)
    create_state_table(db, "srm-state")
    state = DynamoDBState(db, "srm-state")
    for i in range(50):
        state.record_runs("a", "b", "t", 0, [Run(i, i, 1)])
    print("written", flush=True)
    time.sleep(600)
    """
)


def state_of(url: str) -> StateStore:
    return DynamoDBState(boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url), "srm-state")


def test_durable_store_keeps_acknowledged_writes_when_its_owner_is_killed_and_dies_with_it(tmp_path: Path):
    # GIVEN a process that started the durable store and had 50 state writes acknowledged
    state_dir = tmp_path / ".srm-local"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(state_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "written"
        stores = child_pids(owner.pid)
        assert stores, "no store process"

        # WHEN that process is killed outright
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
    finally:
        if owner.poll() is None:
            owner.kill()

    # THEN its store goes too (nothing keeps the data directory), and the next store has every write
    wait_for(lambda: not any(pid_alive(pid) for pid in stores), 20, message="the store gone with its owner")
    store = LocalStore(state_dir=state_dir)
    try:
        state = state_of(store.start())
        assert state.runs("a", "b", "t", 0) == [Run(0, 0, 50)]
    finally:
        store.stop()


def test_second_store_on_the_same_state_directory_is_refused_with_what_to_do(tmp_path: Path):
    first = LocalStore(state_dir=tmp_path, kind="memory")
    first.start()
    try:
        with pytest.raises(StoreError, match=r"another srm run is using .*: stop it, or start this one in another"):
            LocalStore(state_dir=tmp_path, kind="memory").start()
    finally:
        first.stop()
    assert not (tmp_path / "store.url").exists()
    second = LocalStore(state_dir=tmp_path, kind="memory")  # free again once the first stopped
    try:
        db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=second.start())
        create_state_table(db, "srm-state")
    finally:
        second.stop()


def test_durable_store_without_java_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no java there

    with pytest.raises(StoreError, match=r"needs Java 17 or newer.*--store memory.*--endpoint-url"):
        LocalStore(state_dir=tmp_path / ".srm-local").start()
    assert not (tmp_path / ".srm-local" / "store.url").exists()
