"""Source offsets in MM2's offsets topic format (Kafka Connect's JSON key, MM2's value, srm's runs beside it)."""

from __future__ import annotations

import pytest

from srm.core.offsets import Run
from srm.core.source_offsets import SourceOffset, SourceOffsetError, offsets_topic, parse_source_partition


def test_key_and_value_are_connects_bytes_for_mirror_source_connector():
    offset = SourceOffset("us-west", "orders", 3, 41, (Run(0, 0, 30), Run(30, 31, 12)))

    assert offset.key() == b'["MirrorSourceConnector",{"cluster":"us-west","partition":3,"topic":"orders"}]'
    assert offset.value() == b'{"offset":41,"runs":[[0,0,30],[30,31,12]]}'
    assert offset.next == 42
    assert offsets_topic("us-west") == "mm2-offsets.us-west.internal"


def test_parse_reads_back_what_was_written_and_mm2s_own_value():
    offset = SourceOffset("a", "t", 0, 9, (Run(5, 7, 5),))

    assert SourceOffset.parse(offset.key(), offset.value()) == offset
    assert SourceOffset.parse(offset.key(), b'{"offset":9}') == SourceOffset("a", "t", 0, 9)


@pytest.mark.parametrize(
    "key",
    [b'["MirrorCheckpointConnector",{"cluster":"a","partition":0,"topic":"t"}]', b"not json", b'{"a":1}', b"[1]"],
)
def test_other_keys_are_not_source_offsets(key: bytes):
    assert parse_source_partition(key) is None
    assert SourceOffset.parse(key, b'{"offset":1}') is None


def test_a_tombstone_holds_no_offset_and_a_broken_value_is_an_error():
    key = SourceOffset("a", "t", 0, 1).key()

    assert SourceOffset.parse(key, None) is None
    with pytest.raises(SourceOffsetError, match="unreadable source offset"):
        SourceOffset.parse(key, b'{"offset":"x"}')
