"""Raw metric sinks: hourly local files, Firehose → S3 (moto or LocalStack), and an emitter that never fails the
caller."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import boto3
import pytest

from srm.aws.firehose import FirehoseSink
from srm.metrics.model.schema import HeartbeatSample, decode, encode
from srm.metrics.sinks import FileSink, MetricsEmitter, raw_partition
from tests.support.aws import aws

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


def sample(i: int) -> HeartbeatSample:
    return HeartbeatSample(ts=T0 + i, source="a", target="b", age_ms=float(i))


def test_raw_partition_is_the_utc_date_and_hour() -> None:
    assert raw_partition(T0) == "dt=2023-11-14/hour=22"


def test_file_sink_appends_hourly_files_and_rolls_over_at_max_bytes(tmp_path: Path) -> None:
    now = [T0]
    sink = FileSink(tmp_path, "p1", max_bytes=150, clock_ms=lambda: now[0])
    sink.send([encode(sample(i)) for i in range(2)])
    sink.send([encode(sample(2))])
    now[0] += HOUR_MS
    sink.send([encode(sample(3))])
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.jsonl"))
    assert files == [
        "dt=2023-11-14/hour=22/p1-0.jsonl",
        "dt=2023-11-14/hour=22/p1-1.jsonl",
        "dt=2023-11-14/hour=23/p1-0.jsonl",
    ]
    lines = [line for f in sorted(tmp_path.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    assert [decode(line) for line in lines] == [sample(i) for i in range(4)]


class FlakySink:
    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.calls = 0
        self.lines: list[str] = []

    def send(self, lines: Sequence[str]) -> None:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise ConnectionError("sink down")
        self.lines.extend(lines)


def test_emitter_counts_and_logs_a_failed_send_and_keeps_going(caplog: pytest.LogCaptureFixture) -> None:
    sink = FlakySink(fail_first=1)
    emitter = MetricsEmitter(sink, producer="t", linger_s=0)
    emitter.emit(sample(0))
    assert emitter.flush()
    emitter.emit(sample(1))
    assert emitter.close()
    assert (emitter.counts.sent, emitter.counts.failed, emitter.counts.dropped) == (1, 1, 0)
    assert [decode(line) for line in sink.lines] == [sample(1).model_copy(update={"id": "t:1"})]  # ids: one a record
    assert "metrics not sent: 1 lines, ConnectionError" in caplog.text


class BlockedSink:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.lines: list[str] = []

    def send(self, lines: Sequence[str]) -> None:
        self.release.wait(10)
        self.lines.extend(lines)


def test_emitter_never_blocks_when_full_and_counts_what_it_dropped() -> None:
    sink = BlockedSink()
    emitter = MetricsEmitter(sink, producer="t", capacity=5, batch_size=1, linger_s=0)
    for i in range(20):
        emitter.emit(sample(i))  # the sender is stuck on the first: the buffer holds 5 more, the rest are dropped
    sink.release.set()
    assert emitter.close()
    assert emitter.counts.dropped + emitter.counts.sent == 20
    assert 5 <= emitter.counts.sent <= 6
    assert len(sink.lines) == emitter.counts.sent


@pytest.fixture
def firehose() -> Iterator[tuple[object, object]]:
    with aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="metrics")
        client = boto3.client("firehose", region_name="us-east-1")
        client.create_delivery_stream(
            DeliveryStreamName="srm-metrics",
            DeliveryStreamType="DirectPut",
            ExtendedS3DestinationConfiguration={
                "RoleARN": "arn:aws:iam::123456789012:role/firehose",
                "BucketARN": "arn:aws:s3:::metrics",
                "Prefix": "metrics/raw/",
            },
        )
        yield client, s3


@pytest.mark.aws_adapter
def test_firehose_sink_delivers_json_lines_to_s3(firehose: tuple[object, object]) -> None:
    client, s3 = firehose
    sink = FirehoseSink(client, "srm-metrics", record_bytes=300)  # small records: lines are packed into several
    emitter = MetricsEmitter(sink, producer="t", batch_size=1000, linger_s=0)
    for i in range(50):
        emitter.emit(sample(i))
    assert emitter.close()
    assert (emitter.counts.sent, emitter.counts.failed) == (50, 0)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="metrics", Prefix="metrics/raw/")["Contents"]]  # type: ignore[attr-defined]
    lines = [
        line
        for key in keys
        for line in s3.get_object(Bucket="metrics", Key=key)["Body"].read().decode().splitlines()  # type: ignore[attr-defined]
    ]
    received = sorted((decode(line) for line in lines), key=lambda r: r.ts)
    assert [r.model_copy(update={"id": None}) for r in received] == [sample(i) for i in range(50)]
    assert len({r.id for r in received}) == 50  # unique ids: a second delivery of one is recognised


def test_firehose_sink_counts_lines_of_refused_records() -> None:
    class Refusing:
        def put_record_batch(self, DeliveryStreamName: str, Records: list[dict[str, bytes]]) -> dict[str, object]:
            return {
                "FailedPutCount": len(Records),
                "RequestResponses": [{"ErrorCode": "ServiceUnavailable"}] * len(Records),
            }

    emitter = MetricsEmitter(FirehoseSink(Refusing(), "s", retries=1), producer="t", linger_s=0)
    for i in range(3):
        emitter.emit(sample(i))
    assert emitter.close()
    assert (emitter.counts.sent, emitter.counts.failed) == (0, 3)
