"""Generated raw metric records with known answers: the samples behind every sketch are kept."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from srm.metrics.model.schema import MirrorBatch, SketchData, encode
from srm.metrics.model.sketch import Sketch
from srm.metrics.sinks import raw_partition

T0 = 1_700_002_800_000  # 2023-11-14 23:00:00 UTC, the start of an hour
MINUTE = 60_000
HOUR = 3_600_000


@dataclass
class Batch:
    """A mirror batch and the latencies and ages of its records."""

    ts: int
    topic: str
    partition: int
    latencies: list[float]
    ages: list[float]
    bytes: int = field(default=0)

    def record(self) -> MirrorBatch:
        return MirrorBatch(
            ts=self.ts,
            source="a",
            target="b",
            topic=self.topic,
            remote_topic=f"a.{self.topic}",
            partition=self.partition,
            records=len(self.latencies),
            bytes=self.bytes,
            latency=SketchData.of(Sketch.of(self.latencies)),
            age=SketchData.of(Sketch.of(self.ages)),
        )


def batches(seed: int, count: int, start: int, span_ms: int) -> list[Batch]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(1, 40)
        latencies = [float(int(rng.lognormvariate(4, 1.2))) for _ in range(n)]  # ms, some 0
        ages = [x + rng.randint(0, 300_000) for x in latencies]  # records created up to 5 minutes before
        topic = rng.choice(["orders", "payments"])
        partition = rng.randint(0, 2)
        out.append(Batch(start + rng.randrange(span_ms), topic, partition, latencies, ages, n * rng.randint(10, 500)))
    return out


def write(root: Path, name: str, lines: Iterable[str], *, arrived_ms: int, append: bool = False) -> Path:
    """JSON lines into ``root/dt=…/hour=…/<name>.jsonl`` (the folder of the arrival hour, as the sinks do)."""
    path = root / raw_partition(arrived_ms) / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        f.writelines(f"{line}\n" for line in lines)
    return path


def encoded(records: Iterable[MirrorBatch]) -> list[str]:
    return [encode(r) for r in records]
