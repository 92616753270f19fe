"""``S3RawStore`` against moto's S3: what it lists as raw data, the manifest and the state it keeps beside it, and
the lock that refuses a second concurrent run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from srm.metrics.runner import ConcurrentRunError, RawFile, S3RawStore, run_once

BUCKET = "raw-metrics"


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def store(s3: Any, **kwargs: Any) -> S3RawStore:
    return S3RawStore(s3, BUCKET, "metrics/raw/", "metrics/manifest.json", **kwargs)


def keys(s3: Any) -> set[str]:
    return {item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def test_listing_is_the_raw_objects_under_the_prefix_and_nothing_else(s3: Any) -> None:
    # GIVEN Firehose's objects (gzip and plain), a marker, and objects outside the prefix
    for key, body in {
        "metrics/raw/dt=2026-11-27/hour=16/srm-metrics-1-2026-11-27-16-00-00-abc.gz": b"x" * 7,
        "metrics/raw/dt=2026-11-27/hour=16/old.jsonl": b"{}\n",
        "metrics/raw/_SUCCESS": b"",
        "metrics/errors/processing-failed/dt=2026-11-27/hour=16/e.gz": b"e",
        "metrics/manifest.json": b"{}",
    }.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    # WHEN the store lists the raw data
    listed = store(s3).list()
    # THEN only the raw objects, as Spark reads them, with their sizes
    assert [(f.path, f.size) for f in listed] == [
        (f"s3://{BUCKET}/metrics/raw/dt=2026-11-27/hour=16/old.jsonl", 3),
        (f"s3://{BUCKET}/metrics/raw/dt=2026-11-27/hour=16/srm-metrics-1-2026-11-27-16-00-00-abc.gz", 7),
    ]
    assert all(isinstance(f, RawFile) and f.mtime_ms > 0 for f in listed)


def test_an_object_is_read_once_whole_and_never_again(s3: Any) -> None:
    raw = store(s3)
    f = RawFile(f"s3://{BUCKET}/metrics/raw/a.gz", 10, 0)
    assert raw.part(f, 0, settled=False) == (f.path, 10)
    assert raw.part(RawFile(f.path, 12, 0), 10, settled=True) == (None, 12)  # replaced in place: not read again


def test_manifest_and_partials_round_trip(s3: Any) -> None:
    raw = store(s3)
    assert raw.load_manifest() == {}
    # GIVEN a run's partials and ids written under the state prefix (as Spark writes Parquet)
    gen1, gen10 = raw.state_uri("partials/run1/_hour=1"), raw.state_uri("partials/run1/_hour=10")
    assert gen1 == f"s3://{BUCKET}/metrics/manifest.json.state/partials/run1/_hour=1"
    for uri in (gen1, gen10):
        for part in ("part-0.parquet", "part-1.parquet"):
            s3.put_object(Bucket=BUCKET, Key=f"{uri.removeprefix(f's3://{BUCKET}/')}/{part}", Body=b"p")
    manifest = {"v": 2, "files": {f"s3://{BUCKET}/metrics/raw/a.gz": 10}, "hours": {"1": {"partials": "run1"}}}
    # WHEN the manifest is saved and loaded, and a replaced generation removed
    raw.save_manifest(manifest)
    assert store(s3).load_manifest() == manifest
    raw.remove(gen1)
    # THEN exactly that generation's objects are gone (not the hour whose name starts the same)
    state = {k for k in keys(s3) if ".state/" in k}
    assert state == {
        "metrics/manifest.json.state/partials/run1/_hour=10/part-0.parquet",
        "metrics/manifest.json.state/partials/run1/_hour=10/part-1.parquet",
    }
    raw.remove(gen1)  # removing again is nothing
    # AND the state is never listed as raw data, even under the raw prefix
    inside = S3RawStore(s3, BUCKET, "metrics/", "metrics/manifest.json")
    assert all(".state/" not in f.path for f in inside.list())


def test_a_second_concurrent_run_is_refused(s3: Any) -> None:
    first, second = store(s3), store(s3)
    with first.lock("run-1"):
        with pytest.raises(ConcurrentRunError, match="run-1"), second.lock("run-2"):
            pass
        # a whole run is refused before it reads or writes anything
        with pytest.raises(ConcurrentRunError):
            run_once(None, second, None, now_ms=0)  # type: ignore[arg-type]
        assert "metrics/manifest.json" not in keys(s3)
    assert "metrics/manifest.json.lock" not in keys(s3)
    with second.lock("run-2"):  # released: the next run takes it
        assert json.loads(s3.get_object(Bucket=BUCKET, Key="metrics/manifest.json.lock")["Body"].read())["owner"] == (
            "run-2"
        )


def test_a_lock_left_by_a_crashed_run_is_taken_over_after_its_ttl(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="metrics/manifest.json.lock", Body=json.dumps({"owner": "dead", "since_ms": 0}))
    with store(s3, lock_ttl_s=60).lock("run-2"):
        pass
    assert "metrics/manifest.json.lock" not in keys(s3)
