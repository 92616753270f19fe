"""Bad input as a new user meets it, through the real CLIs (subprocesses): each row is one case. Whatever the
input, the answer is the documented exit status and one line (or the few a row allows) that names the key, file or
cluster at fault — never a traceback, never a secret, never a flood of client logs.

A row's files are written to its own directory (``{dir}`` in its arguments); ``SECRET`` stands in every config a row
writes where a password would be, and must appear in no output.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from srm.local.store import free_port
from tests.support.kafka import wait_for
from tests.support.runtime import SrmRun, run_cli, write_config

pytestmark = pytest.mark.e2e

A = "127.0.0.1:9"  # never contacted: validation fails first
B = "127.0.0.1:19"
SECRET = "s3cr3t-never-printed"
CLOSED, CLOSED_B = (f"127.0.0.1:{free_port()}" for _ in "ab")  # nothing listens there: clusters that do not answer
SILENT = f"clusters:\n  a: {{bootstrap.servers: '{CLOSED}'}}\n  b: {{bootstrap.servers: '{CLOSED_B}'}}\n"
SILENT += "flows:\n  a->b: {enabled: true}\n"
# no AWS credentials anywhere (nor instance metadata asked for them)
NO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "",
    "AWS_SECRET_ACCESS_KEY": "",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{SECRET}";'
TWO_CLUSTERS = f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{bootstrap.servers: '{B}'}}\n"
MM2 = f"clusters = a, b\na.bootstrap.servers = {A}\nb.bootstrap.servers = {B}\na->b.enabled = true\n"
# MM2 plus SCRAM on cluster a (lines 5-8), the password written out
SASL = MM2 + f"a.security.protocol = SASL_PLAINTEXT\n# SCRAM\n\na.sasl.jaas.config = {JAAS}\n"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # the CLI (srm, srm-control) and its arguments; "{dir}" is the row's directory
    files: Mapping[str, str | bytes] = field(default_factory=dict)  # written into the row's directory first
    says: tuple[str, ...] = ()  # fragments stderr carries: the key, file:line, cluster
    exit: int = 2
    lines: int = 1  # stderr lines at most
    timeout: float = 60.0  # the run must end within it (a hang fails the row)
    env: Mapping[str, str] = field(default_factory=dict)


def run(*args: str) -> tuple[str, ...]:
    return ("srm", "run", *args)


def check(config: str) -> tuple[str, ...]:
    return ("srm", "check", "--config", config)


CASES: dict[str, Case] = {
    # -- the config file itself ------------------------------------------------------------------------------------
    "unknown-alias": Case(
        run("--config", "{dir}/srm.yaml"),
        {"srm.yaml": TWO_CLUSTERS + "flows:\n  a->z: {enabled: true}\n"},
        ("a->z.enabled", "'z'", "srm.yaml:5"),
    ),
    "bad-regex": Case(
        run("--config", "{dir}/srm.yaml"),
        {"srm.yaml": TWO_CLUSTERS + "flows:\n  a->b: {enabled: true, topics: 'orders.(['}\n"},
        ("a->b.topics", "orders.([", "not a valid regex"),
    ),
    "missing-bootstrap": Case(
        run("--config", "{dir}/srm.yaml"),
        {"srm.yaml": f"clusters:\n  a: {{bootstrap.servers: '{A}'}}\n  b: {{}}\nflows:\n  a->b: {{enabled: true}}\n"},
        ("b.bootstrap.servers", "srm.yaml"),
    ),
    "connectors-contradict": Case(
        ("srm", "check", "--connectors", "{dir}/connectors"),
        {
            "connectors/source.json": '{"name": "s", "config": {"connector.class": "MirrorSourceConnector", '
            f'"source.cluster.alias": "a", "target.cluster.alias": "b", "source.cluster.bootstrap.servers": "{A}", '
            '"topics": "orders.*"}}',
            "connectors/checkpoint.json": '{"name": "c", "config": {"connector.class": "MirrorCheckpointConnector", '
            '"source.cluster.alias": "a", "target.cluster.alias": "b", "topics": "payments.*"}}',
        },
        ("contradict", "checkpoint.json", "source.json", "topics"),
    ),
    "connectors-unknown-class": Case(
        ("srm", "run", "--connectors", "{dir}/connectors"),
        {
            "connectors/sink.yaml": "kind: KafkaConnector\nspec:\n  class: io.confluent.S3SinkConnector\n"
            "  config: {source.cluster.alias: a}\n",
        },
        ("sink.yaml", "S3SinkConnector", "MirrorSourceConnector"),
    ),
    # -- Single Message Transforms ---------------------------------------------------------------------------------
    "transform-missing-predicate": Case(
        check("{dir}/mm2.properties"),
        {
            "mm2.properties": MM2 + "a->b.transforms = drop\na->b.transforms.drop.type = Filter\n"
            "a->b.transforms.drop.predicate = isTombstone\n"
        },
        ("a->b.transforms.drop.predicate", "mm2.properties:7", "no predicate 'isTombstone'"),
    ),
    "transform-bad-regex": Case(
        run("--config", "{dir}/srm.yaml"),
        {
            "srm.yaml": TWO_CLUSTERS + "flows:\n  a->b: {enabled: true, transforms: f, transforms.f.type: Filter, "
            "transforms.f.predicate: p, predicates: p, predicates.p.type: TopicNameMatches, "
            "predicates.p.pattern: 'audit.(['}\n"
        },
        ("a->b.predicates.p.pattern", "audit.([", "not a valid regex"),
    ),
    "transform-missing-param": Case(
        check("{dir}/mm2.properties"),
        {
            "mm2.properties": MM2 + "transforms = origin\ntransforms.origin.type = InsertHeader\n"
            "transforms.origin.value.literal = west\n"
        },
        ("transforms.origin.header", "missing"),
    ),
    "transform-unknown-java-class": Case(
        run("--config", "{dir}/mm2.properties"),
        {
            "mm2.properties": MM2 + "a->b.transforms = x\n"
            "a->b.transforms.x.type = io.debezium.transforms.ExtractNewRecordState\n"
        },
        ("a->b.transforms.x.type", "mm2.properties:6", "ExtractNewRecordState", "Filter, InsertHeader, DropHeaders"),
    ),
    "transform-router-in-connector": Case(
        ("srm", "check", "--connectors", "{dir}/connectors"),
        {
            "connectors/source.json": '{"name": "s", "config": {"connector.class": "MirrorSourceConnector", '
            f'"source.cluster.alias": "a", "target.cluster.alias": "b", "source.cluster.bootstrap.servers": "{A}", '
            f'"target.cluster.bootstrap.servers": "{B}", "transforms": "route", '
            '"transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter"}}',
        },
        ("source.json", "transforms.route.type", "RegexRouter", "replication.policy.class"),
    ),
    "flow-to-itself": Case(
        run("--config", "{dir}/mm2.properties"),
        {"mm2.properties": MM2.replace("a->b.enabled", "a->a.enabled")},
        ("a->a", "mm2.properties:4"),
    ),
    "nonexistent-file": Case(run("--config", "{dir}/missing.yaml"), {}, ("missing.yaml", "cannot read")),
    "unknown-extension": Case(run("--config", "{dir}/srm.json"), {"srm.json": "{}"}, ("srm.json", ".properties")),
    # -- what older versions took ----------------------------------------------------------------------------------
    "retired-store-option": Case(
        run("--config", "{dir}/srm.yaml", "--store", "memory"),
        {"srm.yaml": TWO_CLUSTERS + "flows:\n  a->b: {enabled: true}\n"},
        ("--store memory", "no longer runs", "leave --store out", "--endpoint-url"),
    ),
    "retired-dynamodb-local-state-dir": Case(  # --store durable's tables: kept, and how to reach them said
        run("--config", "{dir}/srm.yaml"),
        {
            "srm.yaml": TWO_CLUSTERS + "flows:\n  a->b: {enabled: true}\n",
            ".srm-local/dynamodb/shared-local-instance.db": b"SQLite format 3\x00",
        },
        (
            "/.srm-local/dynamodb holds the state of the DynamoDB Local store (--store durable)",
            "srm no longer runs",
            "-sharedDb -dbPath",
            "--endpoint-url http://127.0.0.1:8000",
            "to start afresh with the state in Kafka, remove",
        ),
    ),
    "run-endpoint-not-answering": Case(  # that DynamoDB Local not started (yet): said in one line, after the clusters'
        run("--config", "{dir}/srm.yaml", "--endpoint-url", f"http://{CLOSED}"),
        {"srm.yaml": SILENT},
        (f"srm: --endpoint-url http://{CLOSED}: no DynamoDB answers there", "Could not connect"),
        exit=1,
        lines=3,
    ),
    # -- config values and encodings -------------------------------------------------------------------------------
    "latin1-comment-run": Case(
        run("--config", "{dir}/mm2.properties"),
        {"mm2.properties": f"# caf\xe9\n{MM2}".encode("latin-1")},
        ("mm2.properties:1", "not UTF-8", "0xe9", "offset 5"),
    ),
    "latin1-comment-check": Case(
        check("{dir}/srm.yaml"),
        {"srm.yaml": (TWO_CLUSTERS + "# r\xe9plication\nflows:\n  a->b: {enabled: true}\n").encode("latin-1")},
        ("srm.yaml:4", "not UTF-8", "0xe9"),
    ),
    "latin1-comment-import": Case(
        ("srm-control", "--local", "config", "import", "{dir}/srm.yaml"),
        {"srm.yaml": (TWO_CLUSTERS + "# r\xe9plication\n").encode("latin-1")},
        ("srm.yaml:4", "not UTF-8", "0xe9"),
    ),
    "random-bytes-check": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": bytes(range(128, 256)) * 2},
        ("mm2.properties:1", "not UTF-8", "0x80", "offset 0"),
    ),
    "random-bytes-import": Case(
        ("srm-control", "--local", "config", "import", "{dir}/mm2.properties"),
        {"mm2.properties": b"clusters = a\n\x9c\xfa\x13\x88"},
        ("mm2.properties:2", "not UTF-8", "0x9c", "offset 13"),
    ),
    "binary-file-run": Case(
        run("--config", "{dir}/srm.yaml"), {"srm.yaml": b"\x00\x01\xff\xfe" * 64}, ("srm.yaml:1", "not a text file")
    ),
    "binary-file-import": Case(
        ("srm-control", "--local", "config", "import", "{dir}/srm.yaml"),
        {"srm.yaml": b"\x7fELF\x02\x01\x01\x00" + bytes(56)},
        ("srm.yaml:1", "not a text file"),
    ),
    "sasl-mechanism-typo": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": SASL + "a.sasl.mechanism = SCRAMSHA512\n"},
        ("a.sasl.mechanism", "mm2.properties:9", "SCRAMSHA512", "'SCRAM-SHA-512'"),
    ),
    "sasl-mechanism-typo-role": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": SASL + "a.sasl.mechanism = SCRAM-SHA-512\nb.producer.sasl.mechanism = scram\n"},
        ("b.producer.sasl.mechanism", "mm2.properties:10", "'scram'"),
    ),
    "bootstrap-port-not-a-number": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": MM2.replace(f"b.bootstrap.servers = {B}", "b.bootstrap.servers = localhost:abc")},
        ("b.bootstrap.servers", "mm2.properties:3", "localhost:abc", "host:port"),
    ),
    "bootstrap-port-out-of-range": Case(
        run("--config", "{dir}/mm2.properties"),
        {"mm2.properties": MM2.replace(f"a.bootstrap.servers = {A}", f"a.bootstrap.servers = {A},[::1]:70000")},
        ("a.bootstrap.servers", "mm2.properties:2", "[::1]:70000"),
    ),
    "jaas-made-up-module": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": SASL.replace("org.apache.kafka.common.security.scram.Scram", "com.example.Fancy")},
        ("a.sasl.jaas.config", "mm2.properties:8", "com.example.FancyLoginModule", "unknown login module"),
    ),
    "jaas-module-for-another-mechanism": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": SASL + "a.sasl.mechanism = PLAIN\n"},
        ("a.sasl.jaas.config", "mm2.properties:8", "ScramLoginModule", "a.sasl.mechanism = PLAIN"),
    ),
    "jaas-password-only": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": SASL.replace(JAAS, f"{SECRET} required;") + "a.sasl.mechanism = PLAIN\n"},
        ("a.sasl.jaas.config", "mm2.properties:8", "unknown login module"),
    ),
    "errors-tolerance-typo": Case(
        check("{dir}/mm2.properties"),
        {"mm2.properties": SASL + "a.sasl.mechanism = SCRAM-SHA-512\nerrors.tolerence = all\n"},
        ("mm2.properties:10", "errors.tolerence", "did you mean 'errors.tolerance'"),
        exit=0,
    ),
    "exactly-once-support": Case(
        check("{dir}/srm.yaml"),
        {"srm.yaml": TWO_CLUSTERS + "flows:\n  a->b: {enabled: true, exactly.once.support: required}\n"},
        ("srm.yaml:5", "a->b.exactly.once.support", "did you mean 'exactly.once.source.support'"),
        exit=0,
    ),
    # -- clusters that do not answer, and the CLIs' options --------------------------------------------------------
    "check-negative-timeout": Case(
        ("srm", "check", "--config", "{dir}/srm.yaml", "--connect", "--timeout", "-3"),
        {"srm.yaml": SILENT},
        ("--timeout", "'-3'", "greater than 0"),
        lines=2,  # argparse's usage line, then the error
    ),
    "control-negative-timeout": Case(
        ("srm-control", "--local", "offsets", "--source", "a", "--target", "b", "--group", "g", "--timeout", "-3"),
        {},
        ("--timeout", "'-3'", "greater than 0"),
    ),
    "check-connect-silent-clusters": Case(  # one line each, asked side by side (one after another: 9 s)
        ("srm", "check", "--config", "{dir}/srm.yaml", "--connect", "--timeout", "3"),
        {"srm.yaml": SILENT.replace("flows:", f"  c: {{bootstrap.servers: '{CLOSED}'}}\nflows:")},
        (f"cluster a ({CLOSED}) does not answer within 3s", "cluster b (", "cluster c (", "Connection refused"),
        exit=1,
        lines=3,
        timeout=8.0,
    ),
    "status-silent-cluster": Case(
        ("srm", "status", "--config", "{dir}/srm.yaml", "--timeout", "3"),
        {"srm.yaml": SILENT},
        (f"cluster b ({CLOSED_B})", "does not answer within 3s"),  # where the state is: the first flow's target
        exit=1,
        timeout=8.0,
    ),
    "takeover-unknown-flow": Case(  # said before any cluster is asked (they would not answer within 10 s)
        ("srm", "takeover", "--config", "{dir}/srm.yaml", "--source", "b", "--target", "a"),
        {"srm.yaml": SILENT},
        ("no flow b->a in", "srm.yaml", "a->b"),
        timeout=10.0,
    ),
    "takeover-silent-cluster": Case(
        ("srm", "takeover", "--config", "{dir}/srm.yaml", "--source", "a", "--target", "b", "--timeout", "3"),
        {"srm.yaml": SILENT},
        (f"cluster a ({CLOSED}) does not answer within 3s",),
        exit=1,
        timeout=8.0,
    ),
    "endpoint-not-a-url": Case(
        ("srm-control", "--endpoint-url", "notaurl", "flows", "list"),
        {},
        ("--endpoint-url 'notaurl' is not a URL", "http://127.0.0.1:8000"),
    ),
    "endpoint-without-credentials": Case(
        ("srm-control", "--endpoint-url", "http://example.invalid:1", "--region", "us-east-1", "flows", "list"),
        {},
        ("Unable to locate credentials", "AWS_PROFILE"),
        exit=1,
        env=NO_CREDENTIALS,
    ),
    "loopback-endpoint-without-credentials": Case(  # any will do there: it gets as far as connecting
        ("srm-control", "--endpoint-url", f"http://{CLOSED}", "--region", "us-east-1", "flows", "list"),
        {},
        (f"cannot read config table srm-config at http://{CLOSED}", "Could not connect"),
        exit=1,
        env=NO_CREDENTIALS,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_one_clear_line_and_its_exit_status(tmp_path: Path, name: str):
    # GIVEN the row's files, a secret in them where a password would be
    case = CASES[name]
    for file, content in case.files.items():
        path = tmp_path / file
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    # WHEN the CLI is given the row's input
    args = [a.replace("{dir}", str(tmp_path)) for a in case.args]
    result = run_cli(*args, cwd=tmp_path, timeout=case.timeout, env=case.env)

    # THEN it exits as documented with at most the row's lines, naming what is wrong, no traceback and no secret
    output = result.stdout + result.stderr
    assert result.returncode == case.exit, output
    assert "Traceback" not in output, output
    assert SECRET not in output
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= case.lines, result.stderr
    for fragment in case.says:
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"
    if case.exit == 2 and case.args[:2] == ("srm", "run"):
        assert lines[0].startswith("srm: "), lines[0]
        state = {p.relative_to(tmp_path).as_posix() for p in (tmp_path / ".srm-local").rglob("*") if p.is_file()}
        assert state == {f for f in case.files if f.startswith(".srm-local/")}  # nothing was started, nothing lost


# -- clusters that do not answer, and the CLIs' options: what a row cannot hold -------------------------------------
def test_offsets_and_takeover_name_the_cluster_that_does_not_answer_within_the_timeout(tmp_path: Path):
    from moto.server import ThreadedMotoServer

    # GIVEN a config table (moto) whose clusters do not answer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        (tmp_path / "srm.yaml").write_text(SILENT)
        store = ("srm-control", "--endpoint-url", f"http://{host}:{port}", "--region", "us-east-1")
        assert run_cli(*store, "config", "import", "srm.yaml", "--create-tables", cwd=tmp_path).returncode == 0

        for command, silent in (("offsets", CLOSED_B), ("takeover", CLOSED)):
            # WHEN a command that needs a cluster asks it, within 3 s
            started = time.monotonic()
            flow = ("--source", "a", "--target", "b", "--timeout", "3")
            result = run_cli(*store, command, *flow, *(("--group", "g") if command == "offsets" else ()), cwd=tmp_path)

            # THEN one line names the cluster (offsets reads the target's checkpoints; takeover asks both), exit 1
            assert result.returncode == 1, result.stderr
            assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
            assert f"({silent}) does not answer within 3s" in result.stderr, result.stderr
            # the timeout, and a Python start or two on a busy machine (it took 16 s, asking one cluster after another)
            assert time.monotonic() - started < 3 + 10
    finally:
        server.stop()


def test_two_aliases_of_one_cluster_are_refused_by_check_and_run(clusters, tmp_path: Path):
    # GIVEN west and east at one cluster's bootstrap
    one = clusters["a"].bootstrap
    config = write_config(tmp_path / "srm.yaml", {"west": one, "east": one}, {"west->east": {}})

    # WHEN srm check --connect and srm run are given it
    checked = run_cli("srm", "check", "--config", str(config), "--connect", cwd=tmp_path)
    ran = run_cli("srm", "run", "--config", str(config), "--no-metrics", "--no-api", cwd=tmp_path, timeout=30)

    # THEN both refuse it in one line naming the two aliases and the cluster's id, exit 2
    for result in (checked, ran):
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        last = result.stderr.splitlines()[-1]
        assert last.startswith("srm: east and west are the same cluster (id "), result.stderr
    assert checked.stderr.count("\n") == 1
    assert not (tmp_path / ".srm-local" / "store.cluster").exists()  # srm run stopped before it opened the state


def _srm_handles_signals(pid: int) -> bool:
    """Whether srm's handlers are in place: SIGTERM caught (the SigCgt mask of /proc/PID/status). Not SIGINT: the
    interpreter catches that one itself from its first moment."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def test_run_with_a_cluster_that_does_not_answer_logs_a_few_lines_and_stops_promptly(tmp_path: Path):
    # GIVEN srm run with clusters that do not answer, for a minute
    def started(name: str) -> SrmRun:
        (tmp_path / name).mkdir()
        return SrmRun(
            write_config(tmp_path / name / "srm.yaml", {"a": CLOSED, "b": CLOSED_B}, {"a->b": {}}), tmp_path / name
        )

    long = started("minute")
    began = time.monotonic()
    try:
        # WHEN others are stopped (SIGINT) at points of their start meanwhile — importing, asking the clusters,
        # waiting — counted from when srm's handler is in place (before it, the interpreter itself is starting)
        for delay in (0.0, 0.5, 2.0, 6.0):
            run = started(f"stopped-after-{delay:g}s")
            pid = run.process.pid
            wait_for(lambda pid=pid: _srm_handles_signals(pid), timeout=30, interval=0.01, message="srm handlers")
            time.sleep(delay)
            stopping = time.monotonic()
            code = run.stop(timeout=30)

            # THEN each stops within 5 s, cleanly
            assert time.monotonic() - stopping <= 5.0, f"after {delay}s: {run.output()}"
            assert code == 0 and "Traceback" not in run.output(), run.output()
        time.sleep(max(0.0, 60 - (time.monotonic() - began)))
    finally:
        code = long.stop(timeout=30)

    # THEN the minute's log is a few lines: the warnings, repeated ever less often, librdkafka's own lines through
    # srm's logging and rate-limited (none raw)
    log = long.output()
    assert code == 0, log
    assert "cluster a" in log and "does not answer yet" in log, log
    assert re.search(r"^%\d\|", log, re.MULTILINE) is None, log
    assert len(log.splitlines()) <= 30 and len(log.encode()) <= 8_000, log
    assert "Traceback" not in log and "Found credentials" not in log, log
