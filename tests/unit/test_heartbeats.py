"""srm.replication.heartbeat: the mirror finds the newest heartbeat of its source (emitting one: tests/integration)."""

from __future__ import annotations

import struct

from srm.replication.heartbeat import latest_heartbeat

# Built by hand from MM2's Heartbeat schemas: key = sourceClusterAlias STRING, targetClusterAlias STRING;
# value = version INT16 (0), timestamp INT64; STRING = INT16 length + UTF-8; big-endian.
TS = 1_718_000_000_123
GOLDEN_KEY = b"\x00\x07us-west" + b"\x00\x07us-east"
GOLDEN_VALUE = b"\x00\x00" + struct.pack(">q", TS)


def test_latest_heartbeat_newest_of_this_source_ignoring_garbage_and_other_sources() -> None:
    from srm.mm2.formats import Heartbeat

    records = [Heartbeat("a", "b", 5), Heartbeat("a", "c", 9), Heartbeat("x", "b", 99), Heartbeat("a", "b", 7)]
    keys = [h.key() for h in records] + [b"garbage", None]
    values = [h.value() for h in records] + [b"\x00", None]
    assert latest_heartbeat(keys, values, "a") == Heartbeat("a", "c", 9)
    assert latest_heartbeat([b"junk"], [b"junk"], "a") is None
