"""The Kinesis Data Firehose sink of raw metric records (:class:`srm.metrics.sinks.MetricsEmitter` sends through it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from srm.metrics.sinks import SinkError

__all__ = ["FirehoseSink"]


class FirehoseSink:
    """JSON lines put to a Kinesis Data Firehose delivery stream, packed into records of up to ``record_bytes``.

    Firehose bills per record rounded up to 5 KB, so lines are packed (each ends with a newline, so the S3
    objects are JSON lines whatever the packing). ``put_record_batch`` takes at most 500 records and 4 MiB; the
    records it reports as failed are retried ``retries`` times, then counted.
    """

    MAX_RECORDS = 500
    MAX_BATCH_BYTES = 4 << 20

    def __init__(self, client: Any, stream: str, *, record_bytes: int = 1000 * 1024, retries: int = 2) -> None:
        self._client = client
        self.stream = stream
        self.record_bytes = record_bytes
        self.retries = retries

    def _records(self, lines: Sequence[str]) -> list[bytes]:
        records: list[bytes] = []
        current = bytearray()
        for line in lines:
            data = f"{line}\n".encode()
            if current and len(current) + len(data) > self.record_bytes:
                records.append(bytes(current))
                current = bytearray()
            current += data
        if current:
            records.append(bytes(current))
        return records

    def _batches(self, records: list[bytes]) -> list[list[bytes]]:
        batches: list[list[bytes]] = []
        size = 0
        for record in records:
            if not batches or len(batches[-1]) == self.MAX_RECORDS or size + len(record) > self.MAX_BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(record)
            size += len(record)
        return batches

    def send(self, lines: Sequence[str]) -> None:
        failed_lines = 0
        for batch in self._batches(self._records(lines)):
            pending = batch
            for _ in range(self.retries + 1):
                response = self._client.put_record_batch(
                    DeliveryStreamName=self.stream, Records=[{"Data": data} for data in pending]
                )
                if not response.get("FailedPutCount"):
                    pending = []
                    break
                pending = [
                    data
                    for data, result in zip(pending, response["RequestResponses"], strict=True)
                    if result.get("ErrorCode")
                ]
            failed_lines += sum(data.count(b"\n") for data in pending)
        if failed_lines:
            raise SinkError(f"Firehose {self.stream} refused {failed_lines} metric lines", failed=failed_lines)
