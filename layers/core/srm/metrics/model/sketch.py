"""A mergeable quantile sketch (DDSketch's logarithmic mapping) with a compact JSON form.

Values (milliseconds) are counted in log buckets: value ``x >= 1`` goes to bucket ``i = ceil(log_gamma(x))`` with
``gamma = (1 + ALPHA) / (1 - ALPHA)``, and bucket ``i`` stands for the value ``2 * gamma**i / (1 + gamma)``, which
is within ``ALPHA`` (2 %) of every value of ``(gamma**(i-1), gamma**i]``. Values below 1 ms (negative latencies from
clock skew included) are counted in the *zero bucket*, reported as 0: Kafka timestamps have a resolution of 1 ms,
so below it a relative accuracy means nothing. Count, min, max and sum are kept exactly beside the buckets, and a
quantile is clamped to ``[min, max]`` (so p0 and p100 are exact).

Quantile ``q`` of ``n`` values is the bucket holding the value of rank ``floor(q * (n - 1))`` (0-based), that is
numpy's ``quantile(..., method="lower")`` within ``ALPHA``. Merging adds bucket counts, so it is exact,
associative and commutative: the sketch of a union is the merge of the sketches, never an average of percentiles.
The Spark aggregation (:mod:`srm.metrics.aggregate`) computes the same quantiles from the same JSON form natively.

JSON form: ``{"n": count, "min": x, "max": x, "sum": x, "z": zero-bucket count, "b": {"<index>": count}}`` (``z``
omitted when 0). Why not the ``ddsketch`` package: its only serial form is protobuf, which Spark cannot merge
without a Python function per row, and the mapping above is all of it that is needed here.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALPHA", "GAMMA", "MAX_INDEX", "ZERO_INDEX", "Sketch", "bucket_index", "bucket_value"]

ALPHA = 0.02
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LN_GAMMA = math.log(GAMMA)
# The zero bucket's index where buckets are listed together (Spark): below every real index (values >= 1 ms
# have indices >= 0), so sorting by index keeps the order of values.
ZERO_INDEX = -1


def bucket_index(value: float) -> int:
    """The bucket of ``value`` (``ZERO_INDEX`` below 1 ms)."""
    if value < 1.0:
        return ZERO_INDEX
    return math.ceil(math.log(value) / _LN_GAMMA)


# The bucket of the largest double: no value is counted above it. Aggregated sketches are laid out dense (every index
# from the first to the last), so a larger index would be an array of millions of counts, not a value.
MAX_INDEX = bucket_index(sys.float_info.max)


def bucket_value(index: int) -> float:
    """The value a bucket stands for (0 for the zero bucket)."""
    if index == ZERO_INDEX:
        return 0.0
    return 2.0 * GAMMA**index / (1.0 + GAMMA)


@dataclass
class Sketch:
    """Counts of values in log buckets, plus exact count, min, max and sum."""

    n: int = 0
    min: float = math.inf
    max: float = -math.inf
    sum: float = 0.0
    zero: int = 0
    buckets: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, values: Iterable[float]) -> Sketch:
        sketch = cls()
        for value in values:
            sketch.add(value)
        return sketch

    def add(self, value: float, count: int = 1) -> None:
        self.n += count
        self.sum += value * count
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        index = bucket_index(value)
        if index == ZERO_INDEX:
            self.zero += count
        else:
            self.buckets[index] = self.buckets.get(index, 0) + count

    def merge(self, other: Sketch) -> Sketch:
        """Add ``other``'s values to this sketch (in place) and return it."""
        self.n += other.n
        self.sum += other.sum
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.zero += other.zero
        for index, count in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + count
        return self

    def quantile(self, q: float) -> float | None:
        """The value of quantile ``q`` (0..1) within ``ALPHA``; None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within 0..1, got {q}")
        if self.n == 0:
            return None
        rank = q * (self.n - 1)
        seen = self.zero
        if seen > rank:
            return self._clamp(bucket_value(ZERO_INDEX))
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen > rank:
                return self._clamp(bucket_value(index))
        return self.max

    def _clamp(self, value: float) -> float:
        return min(max(value, self.min), self.max)

    @property
    def avg(self) -> float | None:
        return self.sum / self.n if self.n else None

    def to_json(self) -> dict[str, Any]:
        if self.n == 0:
            raise ValueError("an empty sketch has no JSON form: leave the field out")
        out: dict[str, Any] = {"n": self.n, "min": self.min, "max": self.max, "sum": self.sum}
        if self.zero:
            out["z"] = self.zero
        out["b"] = {str(index): count for index, count in sorted(self.buckets.items())}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sketch:
        """The sketch of a JSON form already validated (see :class:`srm.metrics.model.schema.SketchData`)."""
        return cls(
            n=data["n"],
            min=data["min"],
            max=data["max"],
            sum=data["sum"],
            zero=data.get("z", 0),
            buckets={int(index): count for index, count in data["b"].items()},
        )
