"""``glue_jobs/aggregate_metrics.py`` run the way Glue 5 runs it: ``spark-submit`` of the script with the job's
arguments (``--JOB_NAME`` and the template's ``DefaultArguments``), the ``srm`` package as ``--py-files`` (Glue's
``--extra-py-files``), ``awsglue`` on the path (a stand-in: tests/support/glue), DynamoDB through an endpoint (moto's
server). The metrics table it writes holds the known answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from moto.server import ThreadedMotoServer

from srm.aws.metrics_table import create_metrics_table
from tests.spark.rawdata import MINUTE, T0, batches, encoded, write

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

ROOT = Path(__file__).resolve().parents[2]
SEAM = ROOT / "tests" / "support" / "glue"


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def layer_zip(path: Path) -> Path:
    """The core layer's zip as the deployment uploads it: the ``srm`` package at the root."""
    with zipfile.ZipFile(path, "w") as z:
        for file in (ROOT / "layers" / "core" / "srm").rglob("*.py"):
            z.write(file, file.relative_to(ROOT / "layers" / "core"))
    return path


def template_arguments() -> dict[str, str]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    template = yaml.load((ROOT / "template-monitoring.yaml").read_text(), Loader=Loader)
    return template["Resources"]["AggregateMetricsJob"]["Properties"]["DefaultArguments"]


def test_the_glue_job_run_by_spark_submit_aggregates_raw_files_into_the_table(tmp_path: Path, endpoint: str) -> None:
    # GIVEN raw files where the template's arguments say they are, and the metrics table
    defaults = template_arguments()
    bucket = tmp_path / "bucket"
    raw = bucket / defaults["--raw_prefix"]
    mirrored = batches(5, 20, T0, 3 * MINUTE)
    write(raw, "firehose-0", encoded(b.record() for b in mirrored), arrived_ms=T0)
    aws = {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
    aws |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    db = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    create_metrics_table(db, "metrics")
    record = tmp_path / "job.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | aws
    env |= {
        "PYTHONPATH": os.pathsep.join([str(SEAM), str(ROOT)]),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "GLUE_SEAM_RECORD": str(record),
    }
    arguments = {
        "--JOB_NAME": "srm-aggregate-metrics-test",
        "--raw_bucket": bucket.as_uri(),
        "--raw_prefix": defaults["--raw_prefix"],
        "--manifest_key": defaults["--manifest_key"],
        "--metrics_table": "metrics",
        "--job-language": defaults["--job-language"],  # Glue's own arguments reach the script too
    }
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        "local[1]",
        "--driver-memory",
        "512m",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=1",
        "--py-files",
        str(layer_zip(tmp_path / "layer.zip")),
        str(ROOT / "glue_jobs" / "aggregate_metrics.py"),
        *(part for pair in arguments.items() for part in pair),
    ]
    # WHEN Glue would run the job (twice: the second run finds nothing new)
    manifests = []
    for _ in range(2):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        manifests.append(json.loads((bucket / defaults["--manifest_key"]).read_text()))
    # THEN the table holds the known counts, the manifest is saved, and the job was committed
    items = db.get_paginator("scan").paginate(TableName="metrics").build_full_result()["Items"]
    flow_hour = next(i for i in items if i["pk"]["S"] == "1h#flow#a#b" and i["sk"]["N"] == str(T0))
    assert flow_hour["record-count"]["N"] == str(sum(len(b.latencies) for b in mirrored))
    assert manifests[0]["v"] == 2 and list(manifests[0]["hours"]) == [str(T0)]
    assert manifests[1] == manifests[0]  # the second run: nothing new, nothing changed
    assert json.loads(record.read_text()) == {
        "job": "srm-aggregate-metrics-test",
        "args": {k.removeprefix("--"): v for k, v in arguments.items() if k != "--job-language"},
        "committed": True,
    }


def test_glue_arguments_are_required_as_glue_requires_them() -> None:
    from tests.support.glue.awsglue.utils import GlueArgumentError, getResolvedOptions

    assert getResolvedOptions(["x", "--JOB_NAME", "j", "--a=1", "--other", "2"], ["JOB_NAME", "a"]) == {
        "JOB_NAME": "j",
        "a": "1",
    }
    with pytest.raises(GlueArgumentError):
        getResolvedOptions(["x", "--JOB_NAME", "j"], ["JOB_NAME", "a"])
