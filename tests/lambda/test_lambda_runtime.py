"""The functions as Lambda runs them: each ``sam build`` artifact in the Runtime Interface Emulator with awslambdaric,
invoked over the Runtime API with the events of ``events/``, against real brokers and DynamoDB on moto; and the
worst inputs through the same path: a failed invocation (which the event source retries) or a 4xx with a message,
never a traceback as the answer."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from srm.control.verify import STARTED_FACT
from srm.core.verification import verified_positions
from srm.mm2.formats import Checkpoint, Heartbeat
from tests.support.events import load_event
from tests.support.handler import HandlerFlow, kafka_event
from tests.support.kafka import (
    Rec,
    create_topic,
    create_topic_with_records,
    list_topic_names,
    produce,
    read_partition,
    read_topic,
    rewind,
    topic_partitions,
    unique,
)
from tests.support.lambda_runtime import PYTHON, FunctionRuntime, Invocation, template_runtime
from tests.support.sam import MACHINE_ARCHITECTURE, layer_dir

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("lambda_runtime")]

Flow = tuple[HandlerFlow, str]
MAX_PAYLOAD = 6 * 1024 * 1024  # Lambda's synchronous invoke payload


def _contents(records: list[Rec]) -> list[Any]:
    return [r.content() for r in records]


def _mirror(runtimes: dict[str, FunctionRuntime], flow: HandlerFlow, topic: str, partitions: int, count: int) -> None:
    """``count`` records on a new source topic, replicated by one invocation of the built mirror."""
    create_topic_with_records(flow.a, topic, partitions, count)
    answer = runtimes["mirror"].invoke(kafka_event(flow.a, topic, read_topic(flow.a, topic)))
    assert answer.status == 200 and not answer.failed, answer.body[:2000]


def test_mirror_msk_batch_replicates_every_record_to_the_target(
    runtimes: dict[str, FunctionRuntime], lambda_flow: Flow
):
    # GIVEN records on a 2-partition topic the flow selects, and the MSK event of them
    flow, prefix = lambda_flow
    topic = f"{prefix}.orders"
    create_topic_with_records(flow.a, topic, 2, 40)
    source = read_topic(flow.a, topic)
    # WHEN the built mirror function is invoked with it through the Lambda runtime
    answer = runtimes["mirror"].invoke(kafka_event(flow.a, topic, source))
    # THEN it answers the batch's summary and the remote topic holds every record in the same partition and order
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    assert answer.json()["records"] == 40
    remote = read_topic(flow.b, f"a.{topic}")
    assert {p: _contents(r) for p, r in remote.items()} == {p: _contents(r) for p, r in source.items()}


def test_mirror_sample_event_keeps_headers_null_keys_and_tombstones(
    runtimes: dict[str, FunctionRuntime], lambda_flow: Flow
):
    # GIVEN events/msk_batch.json about a topic of the flow (a 2-partition topic on the source)
    flow, prefix = lambda_flow
    topic = f"{prefix}.sample"
    create_topic(flow.a, topic, 2)
    text = json.dumps(load_event("msk_batch.json")).replace('"orders', f'"{topic}')
    event = json.loads(text)
    # WHEN the built mirror is invoked with it
    answer = runtimes["mirror"].invoke(event)
    # THEN its 4 records land with their headers (order, duplicates, signed bytes), null key and null value
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    remote = read_topic(flow.b, f"a.{topic}")
    assert [len(remote[0]), len(remote[1])] == [3, 1]
    first, keyless, tombstone = remote[0]
    assert first.headers == (("trace", b"hi"), ("bin", b"\xff\x00\x80"), ("trace", b"bye"), ("empty", b""))
    assert keyless.key is None and tombstone.value is None


def test_heartbeat_schedule_emits_an_mm2_heartbeat_on_the_source(
    runtimes: dict[str, FunctionRuntime], lambda_flow: Flow
):
    flow, _ = lambda_flow
    # WHEN the built heartbeat function gets the schedule's event
    answer = runtimes["heartbeat"].invoke(load_event("schedule.json"))
    # THEN it says what it emitted, and the source's heartbeats topic holds that heartbeat in MM2's format
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    emitted = answer.json()
    assert (emitted["emitted"], emitted["source"], emitted["target"]) == (True, "a", "b")
    heartbeats = [Heartbeat.decode(r.key, r.value) for r in read_partition(flow.a, emitted["topic"], 0)]
    assert Heartbeat("a", "b", emitted["timestamp"]) in heartbeats


def test_checkpoint_schedule_writes_the_groups_translated_offsets(
    runtimes: dict[str, FunctionRuntime], lambda_flow: Flow
):
    # GIVEN a topic replicated by the built mirror, and a source group that committed offset 12 on it
    flow, prefix = lambda_flow
    topic, group = f"{prefix}.grouped", unique("rie-group")
    _mirror(runtimes, flow, topic, 1, 20)
    rewind(flow.a, group, topic, 1, 12)
    # WHEN the built checkpoint function gets the schedule's event
    answer = runtimes["checkpoint"].invoke(load_event("schedule.json"))
    # THEN a's checkpoints topic on b holds the group's offset, translated exactly
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    expected = Checkpoint(group, f"a.{topic}", 0, 12, 12)
    checkpoints = [Checkpoint.decode(r.key, r.value) for r in read_partition(flow.b, "a.checkpoints.internal", 0)]
    assert expected in checkpoints, answer.json()


def test_verify_schedule_verifies_the_replicated_records(runtimes: dict[str, FunctionRuntime], lambda_flow: Flow):
    # GIVEN a 2-partition topic of 30 records replicated by the built mirror, and a verification due (as if the last
    # had started long ago: the flow verifies every hour)
    flow, prefix = lambda_flow
    topic = f"{prefix}.verified"
    _mirror(runtimes, flow, topic, 2, 30)
    flow.state.update_flow_status("a", "b", **{STARTED_FACT: 0})
    # WHEN the built verify function gets the schedule's event
    answer = runtimes["verify"].invoke(load_event("schedule.json"))
    # THEN it verified the topic's partitions through what was replicated, and keeps that in the flow's status
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    assert answer.json()["verified"] is True
    positions = verified_positions(flow.state.flow_status("a", "b"))
    assert {p: at for (t, p), at in positions.items() if t == topic} == {0: (15, 15), 1: (15, 15)}
    # WHEN the schedule ticks again within verify.interval.seconds THEN nothing is verified
    again = runtimes["verify"].invoke(load_event("schedule.json"))
    assert again.json() == {"verified": False}


def test_topic_sync_schedule_creates_the_remote_topic(runtimes: dict[str, FunctionRuntime], lambda_flow: Flow):
    # GIVEN a new 3-partition topic the flow selects
    flow, prefix = lambda_flow
    topic = f"{prefix}.synced"
    create_topic(flow.a, topic, 3)
    # WHEN the built topic-sync function gets the schedule's event
    answer = runtimes["topic_sync"].invoke(load_event("schedule.json"))
    # THEN the remote topic exists on the target with as many partitions
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    assert topic_partitions(flow.b, f"a.{topic}") == 3


def _api(runtime: FunctionRuntime, method: str, path: str, body: str | None = None, **query: str) -> Invocation:
    event = load_event("api_gateway_metrics.json")
    event.update(httpMethod=method, path=path, body=body, resource=path, pathParameters=None)
    event["requestContext"].update(httpMethod=method, path=f"/prod{path}", resourcePath=path)
    event["queryStringParameters"] = query or None
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} or None
    return runtime.invoke(event)


def _response(answer: Invocation) -> tuple[int, dict[str, Any]]:
    """An API Gateway proxy response: its status and JSON body."""
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    response = answer.json()
    return response["statusCode"], json.loads(response["body"])


def test_metrics_api_answers_api_gateway_requests(runtimes: dict[str, FunctionRuntime], lambda_flow: Flow):
    api = runtimes["metrics_api"]
    # WHEN the flows are listed THEN a->b is there, enabled
    status, body = _response(_api(api, "GET", "/v2/replications"))
    assert status == 200, body
    flows = {(f["source"], f["target"]): f for f in body["replications"]}
    assert flows[("a", "b")]["enabled"] is True
    # WHEN the sample event asks for a metric of topic orders, which a->b does not replicate THEN 404, saying so
    status, body = _response(api.invoke(load_event("api_gateway_metrics.json")))
    assert status == 404 and "'orders'" in body["message"], body
    # WHEN it asks for one of the flow's topics THEN the series (no aggregates yet: no points)
    _, prefix = lambda_flow
    topic = f"{prefix}.orders"
    text = json.dumps(load_event("api_gateway_metrics.json")).replace("/orders/", f"/{topic}/")
    event = json.loads(text)
    event["pathParameters"]["upstreamTopic"] = topic
    status, body = _response(api.invoke(event))
    assert status == 200 and body.get("points") == [], body


@pytest.mark.parametrize(
    ("method", "path", "body", "query", "expected"),
    [
        ("POST", "/v2/replications", "{not json", {}, 405),
        ("GET", "/v2/cluster-metrics/a/b/record-count", None, {"resolution": "5m"}, 400),
        ("GET", "/v2/cluster-metrics/a/b/no-such-metric", None, {}, 400),
    ],
)
def test_metrics_api_bad_request_is_a_4xx_with_a_message(
    runtimes: dict[str, FunctionRuntime], lambda_flow: Flow, method, path, body, query, expected
):
    status, answer = _response(_api(runtimes["metrics_api"], method, path, body, **query))
    assert status == expected, answer
    assert answer["message"] and "Traceback" not in answer["message"]


BAD_EVENTS = {
    "bad-base64-value": lambda t: {
        "eventSource": "aws:kafka",
        "records": {f"{t}-0": [{"topic": t, "partition": 0, "offset": 0, "timestamp": 1, "value": "@@@"}]},
    },
    "foreign-event-source": lambda t: {"eventSource": "aws:sqs", "records": {}},
}


@pytest.mark.parametrize("case", list(BAD_EVENTS))
def test_mirror_malformed_event_fails_the_invocation_and_produces_nothing(
    runtimes: dict[str, FunctionRuntime], lambda_flow: Flow, case: str
):
    flow, prefix = lambda_flow
    topic = f"{prefix}.bad-{case}"
    # WHEN the built mirror gets a malformed MSK event
    answer = runtimes["mirror"].invoke(BAD_EVENTS[case](topic))
    # THEN the invocation fails (the event source retries it) with Lambda's error object and a one-line message
    assert answer.failed, answer.body[:2000]
    error = answer.json()
    assert error["errorType"] == "MalformedEventError"
    assert error["errorMessage"] and "\n" not in error["errorMessage"]
    assert f"a.{topic}" not in list_topic_names(flow.b)


def test_mirror_body_that_is_no_json_fails_the_invocation(runtimes: dict[str, FunctionRuntime], lambda_flow: Flow):
    answer = runtimes["mirror"].invoke(b'{"eventSource": "aws:kafka", "records": ')
    assert answer.failed, answer.body[:2000]
    assert answer.json()["errorType"] == "Runtime.UnmarshalError"


def test_mirror_six_megabyte_batch_replicates_in_full(runtimes: dict[str, FunctionRuntime], lambda_flow: Flow):
    # GIVEN records whose MSK event is just under Lambda's 6 MB payload (base64 makes 4.4 MB of values 5.9 MB)
    flow, prefix = lambda_flow
    topic = f"{prefix}.large"
    create_topic(flow.a, topic, 1)
    now = int(time.time() * 1000)
    produce(flow.a, topic, [(0, Rec(f"k{i}".encode(), bytes([i]) * 98_000, (), now + i)) for i in range(45)])
    source = read_topic(flow.a, topic)
    event = kafka_event(flow.a, topic, source)
    size = len(json.dumps(event))
    assert 5.5 * 2**20 < size <= MAX_PAYLOAD, size
    # WHEN the built mirror is invoked with it
    answer = runtimes["mirror"].invoke(event)
    # THEN every record is on the target
    assert answer.status == 200 and not answer.failed, answer.body[:2000]
    assert answer.json()["records"] == 45
    assert _contents(read_topic(flow.b, f"a.{topic}")[0]) == _contents(source[0])


def test_each_function_starts_cold_once_then_stays_warm(runtimes: dict[str, FunctionRuntime], lambda_flow: Flow):
    # WHEN every function is invoked twice more with an event of its own
    empty_batch = {"eventSource": "aws:kafka", "records": {}}
    events = {"mirror": empty_batch, "metrics_api": load_event("api_gateway_metrics.json")}
    for name, runtime in runtimes.items():
        for _ in range(2):
            answer = runtime.invoke(events.get(name) or load_event("schedule.json"))
            assert answer.status == 200 and not answer.failed, (name, answer.body[:2000])
    # THEN each RIE reported one Init Duration: one cold start, its container reused after it
    assert {name: len(r.init_durations_ms()) for name, r in runtimes.items()} == dict.fromkeys(runtimes, 1)


def test_layer_ships_every_handler_and_no_local_only_module(built: Path):
    # GIVEN the built layer on the functions' runtime as Lambda mounts it, nothing else on the path
    layer = layer_dir(built, MACHINE_ARCHITECTURE) / "python"
    probe = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as e:\n"
        "        print(m, 'missing', e.name)\n"
        "    else:\n"
        "        print(m, 'imported')\n"
    )
    handlers = [f"srm.handlers.{p.stem}" for p in (layer / "srm" / "handlers").glob("[a-z]*.py")]
    # the MSK IAM signer is there, on the runtime's boto3 (the layer leaves boto3 and botocore to the runtime)
    handlers.append("aws_msk_iam_sasl_signer.MSKAuthTokenProvider")
    # each with the module found missing: the whole of srm.local and srm.cli, one module of srm.metrics
    local_only = {
        "srm.local.runtime": "srm.local",
        "srm.local.store": "srm.local",
        "srm.local.demo": "srm.local",
        "srm.cli.srm": "srm.cli",
        "srm.metrics.aggregate": "srm.metrics.aggregate",
        "srm.metrics.dashboard": "srm.metrics.dashboard",
    }
    # WHEN each module is imported there
    done = subprocess.run(
        [str(PYTHON), "-c", probe, *handlers, *local_only],
        cwd=layer,
        env={"PYTHONPATH": str(layer), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
    )
    # THEN every handler imports and none of the local runtime, the CLIs or the Spark job is there
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert len(handlers) == 7 and {m: outcome[m] for m in handlers} == dict.fromkeys(handlers, "imported")
    assert {m: outcome[m] for m in local_only} == {m: f"missing {gone}" for m, gone in local_only.items()}
    assert (layer / "srm" / "handlers" / "web" / "index.html").is_file()  # the metrics API's web view
    assert not [p.name for p in layer.iterdir() if p.name.split("-")[0] in ("boto3", "botocore", "s3transfer")]


def test_layer_ships_bytecode_that_needs_no_source_check(built: Path):
    # GIVEN the built layer (Lambda's /opt is read-only: a module without bytecode there is compiled at every cold
    # start) WHEN its modules' bytecode is looked for
    layer = layer_dir(built, MACHINE_ARCHITECTURE) / "python"
    sources = [p for p in layer.rglob("*.py") if "__pycache__" not in p.parts]
    tag = f"cpython-{template_runtime().removeprefix('python').replace('.', '')}"
    missing, checked = [], []
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        if not pyc.is_file():
            missing.append(str(source.relative_to(layer)))
        elif int.from_bytes(pyc.read_bytes()[4:8], "little") != 0b01:  # PEP 552: hash-based, source not checked
            checked.append(str(pyc.relative_to(layer)))
    # THEN every module has it, for the runtime's Python, valid without reading the source or its timestamp
    assert len(sources) > 500 and missing == [] and checked == [], (missing[:10], checked[:10])
