"""srm.mm2.formats: heartbeat, checkpoint and offset-sync records byte for byte as MM2 writes them.

The expected bytes are built here by hand from MM2's schemas (``Heartbeat.java``, ``Checkpoint.java``,
``OffsetSync.java``): Kafka protocol ``Struct`` — STRING = INT16 length + UTF-8, big-endian INT32/INT64, an INT16
version header (0) in front of heartbeat and checkpoint values, none in front of offset-sync values.
"""

from __future__ import annotations

import struct

import pytest

from srm.mm2.formats import Checkpoint, FormatError, Heartbeat, OffsetSync


def mm2_string(s: str) -> bytes:
    data = s.encode("utf-8")
    return struct.pack(">h", len(data)) + data


HEARTBEAT = Heartbeat("us-west", "us-east", 1_700_000_000_123)
HEARTBEAT_KEY = b"\x00\x07us-west" + b"\x00\x07us-east"
HEARTBEAT_VALUE = b"\x00\x00" + struct.pack(">q", 1_700_000_000_123)

CHECKPOINT = Checkpoint("grüppe", "us-west.orders", 7, 1_234, 5_678, "meta")
CHECKPOINT_KEY = mm2_string("grüppe") + b"\x00\x0eus-west.orders" + b"\x00\x00\x00\x07"
CHECKPOINT_VALUE = b"\x00\x00" + struct.pack(">qq", 1_234, 5_678) + b"\x00\x04meta"

OFFSET_SYNC = OffsetSync("orders", 3, 2**40 + 1, 2**33)
OFFSET_SYNC_KEY = b"\x00\x06orders\x00\x00\x00\x03"
OFFSET_SYNC_VALUE = struct.pack(">q", 2**40 + 1) + struct.pack(">q", 2**33)

GOLDEN = [
    pytest.param(HEARTBEAT, HEARTBEAT_KEY, HEARTBEAT_VALUE, id="heartbeat"),
    pytest.param(CHECKPOINT, CHECKPOINT_KEY, CHECKPOINT_VALUE, id="checkpoint"),
    pytest.param(OFFSET_SYNC, OFFSET_SYNC_KEY, OFFSET_SYNC_VALUE, id="offset-sync"),
]


def test_mm2_string_golden_helper_counts_utf8_bytes_not_characters():
    assert mm2_string("grüppe") == b"\x00\x07gr\xc3\xbcppe"


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN)
def test_record_key_and_value_equal_mm2_bytes(record, key, value):
    assert record.key() == key
    assert record.value() == value


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN)
def test_record_decode_of_mm2_bytes_gives_the_record(record, key, value):
    assert type(record).decode(key, value) == record


def test_checkpoint_value_layout_has_version_offsets_then_metadata():
    # GIVEN empty metadata and the largest INT64 downstream offset
    cp = Checkpoint("g", "t", 0, 0, 2**63 - 1, "")

    assert cp.value() == b"\x00\x00" + b"\x00" * 8 + b"\x7f" + b"\xff" * 7 + b"\x00\x00"
    assert Checkpoint.decode(cp.key(), cp.value()) == cp


def test_heartbeat_round_trips_non_ascii_aliases_and_negative_timestamp():
    hb = Heartbeat("ß", "東京", -1)

    assert hb.key() == mm2_string("ß") + mm2_string("東京")
    assert Heartbeat.decode(hb.key(), hb.value()) == hb


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN)
def test_record_decode_truncated_key_or_value_raises_format_error(record, key, value):
    decode = type(record).decode

    for cut in range(len(key)):
        with pytest.raises(FormatError):
            decode(key[:cut], value)
    for cut in range(len(value)):
        with pytest.raises(FormatError):
            decode(key, value[:cut])


@pytest.mark.parametrize(("record", "key", "value"), GOLDEN)
def test_record_decode_missing_bytes_raise_format_error(record, key, value):
    with pytest.raises(FormatError, match="missing bytes"):
        type(record).decode(None, value)
    with pytest.raises(FormatError, match="missing bytes"):
        type(record).decode(key, None)


@pytest.mark.parametrize(
    ("decode", "key", "value"),
    [
        pytest.param(Heartbeat.decode, HEARTBEAT_KEY, b"\x00\x01" + HEARTBEAT_VALUE[2:], id="heartbeat-v1"),
        pytest.param(Heartbeat.decode, HEARTBEAT_KEY, b"\xff\xff" + HEARTBEAT_VALUE[2:], id="heartbeat-v-1"),
        pytest.param(Checkpoint.decode, CHECKPOINT_KEY, b"\x00\x01" + CHECKPOINT_VALUE[2:], id="checkpoint-v1"),
    ],
)
def test_record_decode_wrong_version_raises_format_error(decode, key, value):
    with pytest.raises(FormatError, match="unsupported version"):
        decode(key, value)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(b"\xff\xff" + HEARTBEAT_KEY, id="null-string"),
        pytest.param(b"\x00\x09us-west", id="length-past-end"),
        pytest.param(b"\x00\x02\xff\xfe\x00\x01a", id="not-utf8"),
        pytest.param(b"\x00", id="half-a-length"),
    ],
)
def test_heartbeat_decode_garbage_key_raises_format_error(key):
    with pytest.raises(FormatError):
        Heartbeat.decode(key, HEARTBEAT_VALUE)


def test_offset_sync_value_is_not_versioned():
    # GIVEN an offset sync whose upstream offset starts with two zero bytes, like a version header would
    sync = OffsetSync("t", 0, 5, 6)

    # THEN the value is exactly two INT64s: no header to strip or add
    assert len(sync.value()) == 16
    assert OffsetSync.decode(sync.key(), struct.pack(">qq", 5, 6)).upstream_offset == 5


def test_string_longer_than_int16_cannot_be_encoded():
    with pytest.raises(FormatError, match="does not fit"):
        Heartbeat("a" * 0x8000, "b", 0).key()
    assert Heartbeat("a" * 0x7FFF, "b", 0).key()[:2] == b"\x7f\xff"
