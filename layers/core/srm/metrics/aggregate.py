"""Raw metric records → aggregated metrics, as pure functions of Spark DataFrames (no I/O but :func:`read_lines`).

:func:`parse_lines` turns JSON lines (``file``, ``line``, ``text``) into records typed by the raw schema
(:mod:`srm.metrics.model.schema`, whose field table this module turns into a Spark schema) and bad lines with a reason.
:func:`aggregate` turns records into one row per resolution (1 minute, 1 hour), level (partition, topic, flow),
series and window, with the metrics of :mod:`srm.metrics.table` as snake_case columns. It is
:func:`aggregate_partials` of :func:`partials`: the partials of disjoint sets of records merge (``partials(records,
earlier)``) into those of their union, exactly, which is what lets a run aggregate only new records and merge them
with partials stored by earlier runs (:mod:`srm.metrics.runner`).

How it aggregates, natively (no Python per row):

* every kind is first reduced to partials per partition and minute, named as the aggregates they feed (sums,
  mins, maxes, sketches), then rolled up from those partials to every (resolution, level), each level from the one
  below it (:func:`_rollup`): a sum of sums, a min of mins, so one set of expressions serves every step;
* distributions (replication latency, record age, checkpoint latency) merge sketches. A record's sketch buckets are
  exploded (index, count; the zero bucket as index ``ZERO_INDEX``) and summed per bucket once, into the partials,
  where each sketch is *dense*: its first index and the counts from there, empty buckets included. Dense sketches
  merge element by element (no row per bucket), and quantile ``q`` of ``n`` values is the first bucket, by index,
  whose running count exceeds ``q * (n - 1)``, reported as the bucket's value clamped to the exact min and max: the
  same answer as :meth:`srm.metrics.model.sketch.Sketch.quantile` of the merged sketch. Count, min, max and avg are
  exact;
* lag at a window's end is the last sample of each partition in the window (by ``ts``), summed over the
  partitions of a topic or flow; the oldest-unreplicated age is the largest of them. Heartbeat age and latency are
  the flow's last sample in the window;
* rates are counts over the window's length.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from srm.metrics.model.schema import FIELD_TYPES, KINDS, REQUIRED, SCHEMA_VERSION
from srm.metrics.model.series import LEVELS, RESOLUTIONS
from srm.metrics.model.sketch import GAMMA, MAX_INDEX, ZERO_INDEX

__all__ = [
    "MINUTE_KEYS",
    "OUTPUT_KEYS",
    "aggregate",
    "aggregate_partials",
    "bad_of",
    "check_lines",
    "distinct_records",
    "parse_lines",
    "partials",
    "raw_schema",
    "read_lines",
    "records_of",
]

_CORRUPT = "_corrupt"
_SKETCH = T.StructType(
    [
        T.StructField("n", T.LongType()),
        T.StructField("min", T.DoubleType()),
        T.StructField("max", T.DoubleType()),
        T.StructField("sum", T.DoubleType()),
        T.StructField("z", T.LongType()),
        T.StructField("b", T.MapType(T.StringType(), T.LongType())),
    ]
)
_TYPES: dict[str, T.DataType] = {
    "long": T.LongType(),
    "double": T.DoubleType(),
    "string": T.StringType(),
    "sketch": _SKETCH,
    "counts": T.MapType(T.StringType(), T.LongType()),
}
_SERIES = ("source", "target", "topic", "partition")
OUTPUT_KEYS = ("resolution", "level", *_SERIES, "window_start")
_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


def raw_schema() -> T.StructType:
    """The Spark schema of a raw line: every field of the raw schema, plus the corrupt-record column."""
    fields = [T.StructField(name, _TYPES[tag]) for name, tag in FIELD_TYPES.items()]
    return T.StructType([*fields, T.StructField(_CORRUPT, T.StringType())])


def read_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The lines of JSON-lines files (plain or ``.gz``): ``file`` (URI), ``line`` (null: see below), ``text``.

    Read splittably, line by line (Hadoop's line reader: a plain file in blocks, a gzip stream as one stream), so
    neither a file nor a task's share of it is ever held whole in memory. The price is the line number, which only
    a whole-file read knows: a bad line is reported by its file and its text instead (``grep`` finds it).
    """
    return spark.read.text(list(paths)).select(
        F.input_file_name().alias("file"), F.lit(None).cast("long").alias("line"), F.col("value").alias("text")
    )


def _sketch_problem(name: str) -> Column:
    sketch = F.col(f"j.{name}")
    held = F.coalesce(sketch.z, F.lit(0)) + F.aggregate(
        F.map_values(sketch.b), F.lit(0).cast("long"), lambda a, x: a + x
    )
    bad_index = F.exists(
        F.map_keys(sketch.b), lambda k: k.cast("int").isNull() | (k.cast("int") < 0) | (k.cast("int") > MAX_INDEX)
    )
    bad_count = F.exists(F.map_values(sketch.b), lambda c: c.isNull() | (c < 1))
    problem = (
        sketch.n.isNull()
        | sketch.min.isNull()
        | sketch.max.isNull()
        | sketch.sum.isNull()
        | sketch.b.isNull()
        | (sketch.n < 1)
        | (sketch.min > sketch.max)
        | (sketch.z < 0)
        | bad_index
        | bad_count
        | (held != sketch.n)
    )
    return F.when(sketch.isNotNull() & problem, F.lit(f"{name}: inconsistent sketch"))


def _problem() -> Column:
    """Why a parsed line is not a valid record (null when it is), checked in the order a reader would."""
    j = F.col("j")
    checks: list[Column] = [
        F.when(F.trim("text") == "", F.lit("empty line")),
        F.when(
            j.isNull() | j[_CORRUPT].isNotNull(),
            F.lit("not a JSON object of the raw schema (truncated? a wrong type?)"),
        ),
        F.when(j.v.isNull(), F.lit("no schema version field 'v'")),
        F.when(
            j.v != SCHEMA_VERSION,
            F.concat(
                F.lit("unknown schema version "), j.v.cast("string"), F.lit(f" (this reader knows v={SCHEMA_VERSION})")
            ),
        ),
        F.when(~j.kind.isin(*KINDS), F.concat(F.lit("unknown kind "), F.coalesce(j.kind, F.lit("(none)")))),
    ]
    for kind, required in REQUIRED.items():
        for name in required:
            checks.append(F.when((j.kind == kind) & j[name].isNull(), F.lit(f"{kind} record without {name}")))
    for name, tag in FIELD_TYPES.items():
        if tag == "long":
            checks.append(F.when(j[name] < 0, F.lit(f"{name} is negative")))
        elif tag == "sketch":
            checks.append(_sketch_problem(name))
        elif tag == "counts":
            checks.append(
                F.when(F.exists(F.map_values(j[name]), lambda c: c.isNull() | (c < 0)), F.lit(f"{name}: bad count"))
            )
    checks.append(F.when((j.source == "") | (j.target == ""), F.lit("empty source or target")))
    return F.coalesce(*checks)


def check_lines(lines: DataFrame) -> DataFrame:
    """Lines (``file``, ``line``, ``text``) parsed and checked: the raw schema's columns plus ``file``, ``line``,
    ``reason`` (why the line is bad, null when it is a valid record) and, for bad lines only, the start of
    ``text``. Write it out (or cache it) before filtering on the reason over many lines: Spark pushes such a filter
    below the parse, parsing each line again for every field the reason checks (the runner stages it as Parquet)."""
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = lines.select("file", "line", "text", F.from_json("text", raw_schema(), options).alias("j"))
    reason = _problem()
    return parsed.select(
        "file",
        "line",
        reason.alias("reason"),
        F.when(reason.isNotNull(), F.substring("text", 1, 200)).alias("text"),
        *(f"j.{name}" for name in FIELD_TYPES),
    )


def records_of(checked: DataFrame) -> DataFrame:
    """The valid records of :func:`check_lines`: the raw schema's columns plus ``file``."""
    return checked.where(F.col("reason").isNull()).select("file", *FIELD_TYPES)


def bad_of(checked: DataFrame) -> DataFrame:
    """The bad lines of :func:`check_lines`: ``file``, ``line``, ``reason``, ``text``."""
    return checked.where(F.col("reason").isNotNull()).select("file", "line", "reason", "text")


def parse_lines(lines: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(records, bad lines) of lines with ``file``, ``line`` and ``text`` columns."""
    checked = check_lines(lines)
    return records_of(checked), bad_of(checked)


# -- aggregation -----------------------------------------------------------------------------------------------
# The sketches aggregated, by the prefix of their partial columns: (kind, raw field, output column).
_DISTRIBUTIONS = (
    ("lat", "mirror", "latency", "replication_latency_ms"),
    ("age", "mirror", "age", "record_age_ms"),
    ("ckpt", "checkpoint", "latency", "checkpoint_latency_ms"),
)
# Maps of counts aggregated per key: (output column, kind, the record's map).
_COUNTS_BY: tuple[tuple[str, str, Callable[[], Column]], ...] = (
    ("replication_failures_by_error", "mirror_failure", lambda: F.create_map(F.col("error"), F.lit(1).cast("long"))),
    ("dead_lettered_by_reason", "dead_letter", lambda: F.create_map(F.col("error"), F.col("records"))),
    ("groups_skipped_by_reason", "checkpoint", lambda: F.col("groups_skipped")),
    ("topic_sync_failed_steps", "topic_sync", lambda: F.col("failed")),
)


def _minute(df: DataFrame) -> DataFrame:
    return df.withColumn("window_start", F.col("ts") - F.col("ts") % RESOLUTIONS["1m"])


def _fan_out(rows: DataFrame, targets: Sequence[tuple[Column, str, str]]) -> DataFrame:
    """Each row (minute keys or output keys, then values) once per target (when it applies, resolution, level)
    that applies to it, keyed by the output keys of that target's window."""
    keys = []
    for applies, resolution, level in targets:
        width = RESOLUTIONS[resolution]
        key = F.struct(
            F.lit(resolution).alias("resolution"),
            F.lit(level).alias("level"),
            (F.col("topic") if level in ("topic", "partition") else F.lit(None).cast("string")).alias("topic"),
            (F.col("partition") if level == "partition" else F.lit(None).cast("long")).alias("partition"),
            (F.col("window_start") - F.col("window_start") % width).alias("window_start"),
        )
        keys.append(F.when(applies, key))
    values = [name for name in rows.columns if name not in OUTPUT_KEYS]
    each = rows.select(
        F.explode(F.filter(F.array(*keys), lambda k: k.isNotNull())).alias("_k"), "source", "target", *values
    )
    return each.select(
        "_k.resolution", "_k.level", "source", "target", "_k.topic", "_k.partition", "_k.window_start", *values
    )


def _every_window() -> list[tuple[Column, str, str]]:
    """The targets of a partial's row: every (resolution, level) it counts in."""
    applies = {"flow": F.lit(True), "topic": F.col("topic").isNotNull(), "partition": F.col("partition").isNotNull()}
    return [(applies[level], resolution, level) for resolution in RESOLUTIONS for level in LEVELS]


def _is(kind: str) -> Column:
    return F.col("kind") == kind


def _total(column: str) -> Column:
    """The sum of a map of counts (0 for an empty or absent map)."""
    values = F.coalesce(F.map_values(column), F.array().cast("array<long>"))
    return F.aggregate(values, F.lit(0).cast("long"), lambda a, x: a + x)


# The partial columns of a (partition, minute): (column, value per record, how partials combine). Each is named as
# the aggregate it feeds, so the same combination merges records into partials, partials into partials, and
# partials into every (resolution, level).
def _partial_values() -> list[tuple[str, Column, str]]:
    partial: list[tuple[str, Column, str]] = [
        ("record_count", F.when(_is("mirror"), F.col("records")), "sum"),
        ("byte_count", F.when(_is("mirror"), F.col("bytes")), "sum"),
        ("replication_failures", F.when(_is("mirror_failure"), F.lit(1).cast("long")), "sum"),
        ("replication_retries", F.when(_is("mirror_failure"), F.coalesce("retries", F.lit(0))), "sum"),
        ("replication_failed_records", F.when(_is("mirror_failure"), F.coalesce("records", F.lit(0))), "sum"),
        ("dead_lettered_records", F.when(_is("dead_letter"), F.col("records")), "sum"),
        ("filtered_records", F.when(_is("mirror"), F.coalesce("filtered", F.lit(0))), "sum"),
        ("groups_checkpointed", F.when(_is("checkpoint"), F.col("groups_checkpointed")), "sum"),
        ("groups_skipped", F.when(_is("checkpoint"), _total("groups_skipped")), "sum"),
        ("topics_created", F.when(_is("topic_sync"), F.coalesce("topics_created", F.lit(0))), "sum"),
        ("partitions_created", F.when(_is("topic_sync"), F.coalesce("partitions_created", F.lit(0))), "sum"),
        ("topic_configs_changed", F.when(_is("topic_sync"), F.coalesce("configs_changed", F.lit(0))), "sum"),
        ("topic_acls_changed", F.when(_is("topic_sync"), F.coalesce("acls_changed", F.lit(0))), "sum"),
        ("topic_sync_failures", F.when(_is("topic_sync"), _total("failed")), "sum"),
        # a count of mappings at each run, not events: the window's worst run
        ("mapping_problems", F.when(_is("topic_sync"), F.coalesce("mapping_problems", F.lit(0))), "max"),
        ("lost_offsets", F.when(_is("data_loss"), F.col("lost")), "sum"),
        ("topic_resets", F.when(_is("topic_reset"), F.lit(1).cast("long")), "sum"),
        ("verified_records", F.when(_is("verification"), F.col("compared")), "sum"),
        ("verification_differences", F.when(_is("verification"), F.col("differences")), "sum"),
        ("_lag", F.when(_is("lag"), F.struct("ts", "lag", "oldest_age_ms")), "max"),
        ("_heartbeat", F.when(_is("heartbeat"), F.struct("ts", "age_ms", "latency_ms")), "max"),
    ]
    for prefix, kind, field, _ in _DISTRIBUTIONS:
        sketch = F.when(_is(kind), F.col(field))
        partial += [
            (f"_{prefix}_n", sketch.n, "sum"),
            (f"_{prefix}_min", sketch.min, "min"),
            (f"_{prefix}_max", sketch.max, "max"),
            (f"_{prefix}_sum", sketch.sum, "sum"),
        ]
    return partial


@functools.cache
def _partial_combination() -> dict[str, str]:
    """The partial columns of :func:`_partial_values` and how each combines, in order: its names without building
    its expressions again (each costs the driver a call into the JVM)."""
    return {name: how for name, _, how in _partial_values()}


_COMBINE = {"sum": F.sum, "min": F.min, "max": F.max}
# The last samples (a max of a struct, ``ts`` first) and the kinds of the records that have them.
_SAMPLES = ("_lag", "_heartbeat")
_SAMPLE_KINDS = ("lag", "heartbeat")
# The counts by key of a partial: maps (key → count), summed per key when partials merge.
_COUNT_MAPS = tuple(f"_{name}" for name, *_ in _COUNTS_BY)
# The merged sketches of a partial, dense: ``lo`` the first bucket's index (the zero bucket is ``ZERO_INDEX``, below
# every other) and ``c`` the counts from there on, empty buckets included, summed element by element when partials
# merge. A minute's merged sketch has few empty buckets, and a dense array sums without a row per bucket.
_DENSE = tuple(f"_{prefix}_d" for prefix, *_ in _DISTRIBUTIONS)
# How partials stored the sketches before they were dense: maps of index (a string) → count.
_SPARSE = {f"_{prefix}_b": f"_{prefix}_d" for prefix, *_ in _DISTRIBUTIONS}
MINUTE_KEYS = (*_SERIES, "window_start")


def _scalar_aggs() -> list[Column]:
    return [_COMBINE[how](name).alias(name) for name, how in _partial_combination().items()]


_ENTRIES = "array<struct<m:int,i:int,c:bigint>>"
# Series numbers are sent whole to every task up to this many (some 100 bytes each); more, a long catch-up of a
# large fleet, are joined through a shuffle, so that no process holds all the series a run covers.
_BROADCAST_SERIES = 200_000


def _series_numbers(minutes: DataFrame) -> DataFrame:
    """The minute keys of records, each numbered (``_g``), computed once: buckets are summed per number, one long,
    rather than per key of three strings and two longs, which makes the sum over every bucket of every record a
    hash aggregation of fixed-width keys (several times faster)."""
    return minutes.select(*MINUTE_KEYS).distinct().withColumn("_g", F.monotonically_increasing_id()).localCheckpoint()


def _bucket_entries(minutes: DataFrame, numbers: DataFrame) -> DataFrame:
    """Every record's sketch buckets in long form: (``_g`` the number of its minute keys, ``m`` the index of its
    distribution in :data:`_DISTRIBUTIONS`, ``i`` the bucket's index, ``c`` its count), in one scan of the records
    and one native explode of all their sketches (the zero bucket as index ``ZERO_INDEX``)."""
    empty = F.array().cast(_ENTRIES)
    each = []
    for m, (_, kind, field, _) in enumerate(_DISTRIBUTIONS):
        sketch = F.col(f"r.{field}")
        indices = F.map_keys(sketch.b).cast("array<int>")
        buckets = F.arrays_zip(F.array_repeat(F.lit(m), F.size(indices)), indices, F.map_values(sketch.b))
        zero = F.struct(F.lit(m).alias("m"), F.lit(ZERO_INDEX).alias("i"), sketch.z.alias("c"))
        zeros = F.when(sketch.z > 0, F.array(zero)).otherwise(empty)
        entries = F.concat(buckets.cast(_ENTRIES), zeros)  # the cast names the zipped fields
        each.append(F.when((F.col("r.kind") == kind) & sketch.isNotNull(), entries).otherwise(empty))
    held = F.broadcast(numbers) if numbers.count() <= _BROADCAST_SERIES else numbers
    joined = minutes.alias("r").join(
        held.alias("n"), [F.col(f"r.{k}").eqNullSafe(F.col(f"n.{k}")) for k in MINUTE_KEYS]
    )
    return joined.select("n._g", F.inline(F.concat(*each)))


def _count_entries(records: DataFrame) -> DataFrame:
    """Every record's counts by key in long form: (minute keys, ``m`` the map's name, ``key``, ``c``)."""
    rows = []
    for name, kind, counts in _COUNTS_BY:
        exploded = F.explode(counts()).alias("key", "c")
        rows.append(_minute(records.where(_is(kind))).select(*MINUTE_KEYS, F.lit(f"_{name}").alias("m"), exploded))
    return functools.reduce(lambda a, b: a.unionByName(b), rows)


def _dense_rows(buckets: DataFrame, series: Sequence[str]) -> DataFrame:
    """Bucket entries (``series`` keys, ``m``, ``i``, ``c``) summed per index and laid out dense: one row per series
    and ``m``, with ``d`` the dense sketch. Each bucket brings its count and a zero for every empty index up to the
    next bucket (a window over the sorted indices); the runs are collected in order and flattened, all natively."""
    keys = [*series, "m"]
    summed = buckets.groupBy(*keys, "i").agg(F.sum("c").alias("c"))
    gap = F.coalesce(F.lead("i").over(Window.partitionBy(*keys).orderBy("i")) - F.col("i") - 1, F.lit(0))
    runs = summed.select(*keys, "i", F.concat(F.array("c"), F.array_repeat(F.lit(0).cast("long"), gap)).alias("run"))
    grouped = runs.groupBy(*keys).agg(
        F.min("i").alias("lo"), F.array_sort(F.collect_list(F.struct("i", "run"))).alias("runs")
    )
    counts = F.flatten(F.transform("runs", lambda r: r.run))
    return grouped.select(*keys, F.struct("lo", counts.alias("c")).alias("d"))


def _merged(sketches: Column) -> Column:
    """The element-wise sum of dense sketches (an array of them); null when there are none."""
    lo = F.array_min(F.transform(sketches, lambda s: s.lo))
    end = F.array_max(F.transform(sketches, lambda s: s.lo + F.size(s.c)))

    def zeros(n: Column) -> Column:
        return F.array_repeat(F.lit(0).cast("long"), n)

    def add(total: Column, s: Column) -> Column:
        aligned = F.concat(zeros(s.lo - lo), s.c, zeros(end - s.lo - F.size(s.c)))
        return F.zip_with(total, aligned, lambda a, b: a + b)

    summed = F.struct(lo.alias("lo"), F.aggregate(sketches, zeros(end - lo), add).alias("c"))
    return F.when(F.size(sketches) == 1, sketches[0]).when(F.size(sketches) > 1, summed)


def _dense_of(partial: DataFrame) -> DataFrame | None:
    """The sketches of stored partials as dense rows (minute keys, ``m``, ``d``), as :func:`_dense_rows` gives
    them; None when they hold none in dense form."""
    rows = [
        partial.where(F.col(name).isNotNull()).select(*MINUTE_KEYS, F.lit(name).alias("m"), F.col(name).alias("d"))
        for name in _DENSE
        if name in partial.columns
    ]
    return functools.reduce(lambda a, b: a.unionByName(b), rows) if rows else None


def _sparse_entries(partial: DataFrame) -> DataFrame | None:
    """The sketches of partials stored as maps (before they were dense) as bucket entries; None when there are
    none."""
    rows = [
        partial.select(*MINUTE_KEYS, F.lit(dense).alias("m"), F.explode(name).alias("key", "c")).select(
            *MINUTE_KEYS, "m", F.col("key").cast("int").alias("i"), "c"
        )
        for name, dense in _SPARSE.items()
        if name in partial.columns
    ]
    return functools.reduce(lambda a, b: a.unionByName(b), rows) if rows else None


def _fold(scalars: DataFrame, samples: DataFrame, counts: DataFrame, dense: DataFrame) -> DataFrame:
    """Rows of aggregated scalars, samples, summed counts (``m``, ``key``, ``c``) and dense sketches (``m``, ``d``)
    folded into one row per minute key: the counts into one map per name of :data:`_COUNT_MAPS`, the sketches into
    one column per name of :data:`_DENSE` (null when there are none)."""
    both = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), (scalars, samples, counts, dense))
    columns = list(_partial_combination())
    folded = both.groupBy(*MINUTE_KEYS).agg(
        *(F.first(name, ignorenulls=True).alias(name) for name in columns),
        *(F.collect_list(F.when(F.col("m") == name, F.struct("key", "c"))).alias(name) for name in _COUNT_MAPS),
        *(F.first(F.when(F.col("m") == name, F.col("d")), ignorenulls=True).alias(name) for name in _DENSE),
    )
    return folded.select(
        *MINUTE_KEYS,
        *columns,
        *(F.when(F.size(name) > 0, F.map_from_entries(F.array_sort(name))).alias(name) for name in _COUNT_MAPS),
        *_DENSE,
    )


def partials(records: DataFrame, earlier: DataFrame | None = None) -> DataFrame:
    """Mergeable partials of records: one row per (source, target, topic, partition, minute) with the sums, mins,
    maxes and last samples of :func:`_partial_values`, the counts of :data:`_COUNT_MAPS` and the dense sketches of
    :data:`_DENSE`; merged with the partials ``earlier`` (of other records) when given.

    Partials of disjoint sets of records merge into the partials of their union, exactly: every column is a sum, a
    min, a max, a per-key sum or an element-wise sum. Duplicates (same ``id``) must be removed before. ``records``
    is read once per map, once for the sketches, once for the scalars and once to number the minute keys: pass it
    from Parquet (columns read apart) or cached.

    Scalars, last samples, counts and sketches are each aggregated apart: the scalars' buffers are all fixed-width
    (a hash aggregation over every record), the last samples are structs (a sort, so only over lag and heartbeat
    records), and buckets are summed per (number of the minute keys, sketch, index) in long form before any sketch
    is laid out dense; the earlier partials' sketches are then added to the new ones element-wise, never exploded.
    """
    values = _partial_values()
    scalar_names = [name for name, _, _ in values if name not in _SAMPLES]
    minutes = _minute(records)
    scalars = minutes.select(*MINUTE_KEYS, *(value.alias(name) for name, value, _ in values if name not in _SAMPLES))
    samples = minutes.where(F.col("kind").isin(*_SAMPLE_KINDS)).select(
        *MINUTE_KEYS, *(value.alias(name) for name, value, _ in values if name in _SAMPLES)
    )
    counts = _count_entries(records)
    numbers = _series_numbers(minutes)
    summed = _dense_rows(_bucket_entries(minutes, numbers), ["_g"])
    names = F.array(*(F.lit(name) for name in _DENSE))
    dense = summed.join(numbers, "_g").select(*MINUTE_KEYS, names[F.col("m")].alias("m"), "d")
    if earlier is not None:
        # Partials stored by a version that had no such figure yet: it is none there (null, an empty map).
        types = {**{f.name: f.dataType for f in scalars.schema}, **{f.name: f.dataType for f in samples.schema}}
        missing = [n for n in (*scalar_names, *_SAMPLES) if n not in earlier.columns]
        earlier = earlier.select("*", *(F.lit(None).cast(types[n]).alias(n) for n in missing))
        scalars = scalars.unionByName(earlier.select(*MINUTE_KEYS, *scalar_names))
        sampled = functools.reduce(lambda a, b: a | b, (F.col(name).isNotNull() for name in _SAMPLES))
        samples = samples.unionByName(earlier.where(sampled).select(*MINUTE_KEYS, *_SAMPLES))
        counts = counts.unionByName(_map_entries(earlier))
        sparse = _sparse_entries(earlier)
        old_sketches = (_dense_of(earlier), None if sparse is None else _dense_rows(sparse, MINUTE_KEYS))
        stored = [rows for rows in old_sketches if rows is not None]
        if stored:
            both = functools.reduce(lambda a, b: a.unionByName(b), stored, dense)
            dense = both.groupBy(*MINUTE_KEYS, "m").agg(_merged(F.collect_list("d")).alias("d"))
    combined = _partial_combination()
    return _fold(
        scalars.groupBy(*MINUTE_KEYS).agg(*(_COMBINE[combined[name]](name).alias(name) for name in scalar_names)),
        samples.groupBy(*MINUTE_KEYS).agg(*(F.max(name).alias(name) for name in _SAMPLES)),
        counts.groupBy(*MINUTE_KEYS, "m", "key").agg(F.sum("c").alias("c")),
        dense,
    )


def _map_entries(partial: DataFrame) -> DataFrame:
    """The counts of partials in long form (as :func:`_count_entries` gives them for records)."""
    rows = [
        partial.select(*MINUTE_KEYS, F.lit(name).alias("m"), F.explode(name).alias("key", "c"))
        for name in _COUNT_MAPS
        if name in partial.columns  # stored by a version without this map: no entries
    ]
    return functools.reduce(lambda a, b: a.unionByName(b), rows)


# The level of a flow's partials of no topic while they are rolled up (a topic of their own, never in the table).
_NO_TOPIC = "no-topic"


def _rollup(partial: DataFrame, aggs: Sequence[Column]) -> DataFrame:
    """Partials (one row per minute key) aggregated to every window of every (resolution, level), in two steps:
    first the topic minutes (a flow's partials of no topic as a topic of their own) and partition hours, then from
    those the topic hours and the flow's minutes and hours (the first step's rows passing through as they are);
    partition minutes are the partials. ``aggs`` combines rows of the same columns into one (a sum of sums), so no
    window combines more rows than a topic has partitions, or an hour minutes times a flow's topics."""
    has_topic, has_partition = F.col("topic").isNotNull(), F.col("partition").isNotNull()
    first = (
        _fan_out(
            partial, [(has_topic, "1m", "topic"), (~has_topic, "1m", _NO_TOPIC), (has_partition, "1h", "partition")]
        )
        .groupBy(*OUTPUT_KEYS)
        .agg(*aggs)
    )
    minute = F.col("resolution") == "1m"
    topic_minute = minute & (F.col("level") == "topic")
    rest = (
        _fan_out(
            first,
            [
                (~minute, "1h", "partition"),
                (topic_minute, "1m", "topic"),
                (topic_minute, "1h", "topic"),
                (minute, "1m", "flow"),
                (minute, "1h", "flow"),
            ],
        )
        .groupBy(*OUTPUT_KEYS)
        .agg(*aggs)
    )
    values = [name for name in partial.columns if name not in OUTPUT_KEYS]
    partition_minutes = partial.where(has_partition).select(
        F.lit("1m").alias("resolution"), F.lit("partition").alias("level"), *MINUTE_KEYS, *values
    )
    return partition_minutes.unionByName(rest)


def _lag_sums(scalars: DataFrame) -> DataFrame:
    """Lag of a topic or flow at a window's end: the sum of its partitions' last samples in the window."""
    partitions = scalars.where((F.col("level") == "partition") & F.col("_lag").isNotNull())
    levels = F.array(
        F.struct(F.lit("topic").alias("level"), F.col("topic").alias("topic")),
        F.struct(F.lit("flow").alias("level"), F.lit(None).cast("string").alias("topic")),
    )
    each = partitions.select("resolution", "source", "target", "window_start", "_lag", F.explode(levels).alias("_t"))
    grouped = each.groupBy("resolution", "_t.level", "source", "target", "_t.topic", "window_start").agg(
        F.sum("_lag.lag").alias("replication_records_lag"),
        F.max("_lag.oldest_age_ms").alias("oldest_unreplicated_age_ms"),
    )
    return grouped.withColumn("partition", F.lit(None).cast("long"))


def _quantile_indices(sketch: Column, n: Column) -> Column:
    """The bucket index of each quantile of :data:`_QUANTILES` in a dense sketch of ``n`` values, in one walk of
    its counts: quantile ``q`` is the first bucket whose running count exceeds ``q * (n - 1)``."""
    start = F.struct(
        F.lit(0).cast("long").alias("cum"),
        F.lit(0).alias("k"),
        *(F.lit(None).cast("int").alias(label) for label, _ in _QUANTILES),
    )

    def step(acc: Column, c: Column) -> Column:
        cum = acc.cum + c
        found = (
            F.coalesce(acc[label], F.when(cum > q * (n - 1), sketch.lo + acc.k)).alias(label) for label, q in _QUANTILES
        )
        return F.struct(cum.alias("cum"), (acc.k + 1).alias("k"), *found)

    return F.aggregate(sketch.c, start, step)


def _distribution(prefix: str) -> Column:
    def value(label: str) -> Column:
        index = F.col(f"_{prefix}_{label}")
        raw = F.when(index == ZERO_INDEX, F.lit(0.0)).otherwise(2.0 * F.pow(F.lit(GAMMA), index) / (1.0 + GAMMA))
        return F.least(F.greatest(raw, F.col(f"_{prefix}_min")), F.col(f"_{prefix}_max"))

    n = F.col(f"_{prefix}_n")
    stats = F.struct(
        n.alias("count"),
        F.col(f"_{prefix}_min").alias("min"),
        F.col(f"_{prefix}_max").alias("max"),
        (F.col(f"_{prefix}_sum") / n).alias("avg"),
        *(value(label).alias(label) for label, _ in _QUANTILES),
    )
    return F.when(n > 0, stats)


def distinct_records(records: DataFrame) -> DataFrame:
    """One record per ``id``; records without an id (written before ids existed) are all kept."""
    ranked = records.withColumn("_copy", F.row_number().over(Window.partitionBy("id").orderBy("file", "ts")))
    return ranked.where(F.col("id").isNull() | (F.col("_copy") == 1)).drop("_copy")


def aggregate(records: DataFrame) -> DataFrame:
    """Aggregates of parsed records: :data:`OUTPUT_KEYS` plus one column per metric (null where no data).

    A record delivered twice (same ``id``: Firehose delivers at least once) counts once. The distinct records and
    their partials are each computed once, eagerly, and kept (memory, then disk) until the result is dropped:
    :func:`partials` reads its input once per map and :func:`aggregate_partials` twice, and each read would
    otherwise parse, check and deduplicate the input again.
    """
    distinct = distinct_records(records).localCheckpoint()
    return aggregate_partials(partials(distinct).localCheckpoint())


def aggregate_partials(partial: DataFrame) -> DataFrame:
    """Aggregates of merged partials (one row per minute key): every window of every (resolution, level) they
    cover. ``partial`` is read twice: cache it, or read it from storage, when it is expensive to compute.

    Scalars and dense sketches are rolled up together (:func:`_rollup`), the sketches summed element-wise and each
    walked once for its quantiles; the lag sums come from the partition windows, the counts by key are summed in
    long form (they are few), and one fold puts each window's figures in one row (no window function, no join)."""
    values = list(_partial_combination())
    rolled = _rollup(
        partial.select(*MINUTE_KEYS, *values, *_DENSE),
        [*_scalar_aggs(), *(_merged(F.collect_list(name)).alias(name) for name in _DENSE)],
    )
    # Computed once (the lag sums read it again): one row per window, its sketches already walked.
    scalars = (
        rolled.select(
            *OUTPUT_KEYS,
            *values,
            *(
                _quantile_indices(F.col(f"_{prefix}_d"), F.col(f"_{prefix}_n")).alias(f"_{prefix}_quantiles")
                for prefix, *_ in _DISTRIBUTIONS
            ),
        )
        .select(
            *OUTPUT_KEYS,
            *values,
            *(
                F.col(f"_{prefix}_quantiles")[label].alias(f"_{prefix}_{label}")
                for prefix, *_ in _DISTRIBUTIONS
                for label, _ in _QUANTILES
            ),
        )
        .localCheckpoint()
    )
    summed = (
        _fan_out(_map_entries(partial), _every_window()).groupBy(*OUTPUT_KEYS, "m", "key").agg(F.sum("c").alias("c"))
    )
    merged = scalars.unionByName(_lag_sums(scalars), allowMissingColumns=True).unionByName(
        summed, allowMissingColumns=True
    )
    columns = [name for name in merged.columns if name not in (*OUTPUT_KEYS, "m", "key", "c")]
    counts = {
        name: F.collect_list(F.when(F.col("m") == f"_{name}", F.struct("key", F.col("c").alias("count"))))
        for name, *_ in _COUNTS_BY
    }
    folded = merged.groupBy(*OUTPUT_KEYS).agg(
        *(F.first(name, ignorenulls=True).alias(name) for name in columns),
        *(F.array_sort(column).alias(name) for name, column in counts.items()),
    )
    rows = folded.select(
        *OUTPUT_KEYS,
        *columns,
        *(F.when(F.size(name) > 0, F.map_from_entries(name)).alias(name) for name, *_ in _COUNTS_BY),
    )
    seconds = F.when(F.col("resolution") == "1m", RESOLUTIONS["1m"] / 1000).otherwise(RESOLUTIONS["1h"] / 1000)
    partition_level = F.col("level") == "partition"
    metrics: list[Column | str] = [
        "record_count",
        "byte_count",
        (F.col("record_count") / seconds).alias("record_rate"),
        (F.col("byte_count") / seconds).alias("byte_rate"),
        *(_distribution(prefix).alias(name) for prefix, _, _, name in _DISTRIBUTIONS),
        F.when(partition_level, F.col("_lag.lag"))
        .otherwise(F.col("replication_records_lag"))
        .alias("replication_records_lag"),
        F.when(partition_level, F.col("_lag.oldest_age_ms"))
        .otherwise(F.col("oldest_unreplicated_age_ms"))
        .alias("oldest_unreplicated_age_ms"),
        "replication_failures",
        "replication_retries",
        "replication_failed_records",
        "dead_lettered_records",
        "filtered_records",
        "groups_checkpointed",
        "groups_skipped",
        F.col("_heartbeat.age_ms").alias("heartbeat_age_ms"),
        F.col("_heartbeat.latency_ms").alias("heartbeat_latency_ms"),
        "topics_created",
        "partitions_created",
        "topic_configs_changed",
        "topic_acls_changed",
        "topic_sync_failures",
        *(name for name, *_ in _COUNTS_BY),
        "mapping_problems",
        "lost_offsets",
        "topic_resets",
        "verified_records",
        "verification_differences",
    ]
    return rows.select(*OUTPUT_KEYS, *metrics)
