"""`srm check` as a user runs it, and secrets that never leak: the local runtime and every CLI run with secret values
in the configuration (through ``${env:…}``, ``${file:…}`` and written out), and every byte they wrote is scanned."""

from __future__ import annotations

import secrets
import textwrap
from pathlib import Path

import pytest

from tests.e2e.test_failover import consume_and_commit, produce_values, wait_group_synced
from tests.support.kafka import create_topic, read_partition, unique, wait_replicated
from tests.support.runtime import SrmRun, run_cli, wait_log

pytestmark = pytest.mark.e2e

MSK_IAM_MM2 = textwrap.dedent(
    """\
    clusters = west, east
    west.bootstrap.servers = b-1.src.abc123.c2.kafka.eu-west-1.amazonaws.com:9098
    east.bootstrap.servers = b-1.dst.def456.c3.kafka.us-east-1.amazonaws.com:9098
    security.protocol = SASL_SSL
    sasl.mechanism = AWS_MSK_IAM
    sasl.jaas.config = software.amazon.msk.auth.iam.IAMLoginModule required;
    sasl.client.callback.handler.class = software.amazon.msk.auth.iam.IAMClientCallbackHandler
    east.sasl.mechanism = OAUTHBEARER
    east.sasl.jaas.config = software.amazon.msk.auth.iam.IAMOAuthBearerLoginModule required \
awsRoleArn="arn:aws:iam::123456789012:role/srm-east" awsRoleSessionName="srm";
    east.sasl.login.callback.handler.class = software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler
    west->east.enabled = true
    west->east.topics = orders.*
    west->east.groups = billing
    """
)


def test_check_shows_an_msk_iam_mm2_properties_as_oauthbearer(tmp_path: Path):
    path = tmp_path / "mm2.properties"
    path.write_text(MSK_IAM_MM2)
    result = run_cli("srm", "check", "--config", str(path), "-v", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("sasl.mechanism = OAUTHBEARER") == 6  # two clusters, three roles
    assert out.count("security.protocol = SASL_SSL") == 6
    assert out.count("oauth_cb = <MSK IAM signer, region eu-west-1>") == 3
    assert (
        "oauth_cb = <MSK IAM signer, region us-east-1, role arn:aws:iam::123456789012:role/srm-east (session srm)>"
        in out
    )
    assert "AWS_MSK_IAM" not in out and "jaas" not in out  # translated, nothing Java left
    assert "flow west->east: enabled" in out and "  topics = orders.*" in out and "  groups = billing" in out
    assert "west topic 'orders' → east topic 'west.orders'" in out


def test_check_refuses_an_invalid_config_in_one_line(tmp_path: Path):
    path = tmp_path / "mm2.properties"
    path.write_text(MSK_IAM_MM2.replace("security.protocol = SASL_SSL", "security.protocol = SSL"))
    result = run_cli("srm", "check", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "sasl.jaas.config: MSK IAM authentication needs security.protocol=SASL_SSL" in result.stderr


def test_check_connect_says_which_clusters_answer_and_what_each_flow_replicates_now(clusters, tmp_path: Path):
    a = clusters["a"].bootstrap
    p = unique("chk")
    for topic in (f"{p}.orders", f"{p}.audit"):
        create_topic(a, topic, 1)
    path = tmp_path / "srm.properties"
    path.write_text(
        "clusters = a, b, gone\n"
        f"a.bootstrap.servers = {a}\n"
        f"b.bootstrap.servers = {clusters['b'].bootstrap}\n"
        "gone.bootstrap.servers = 127.0.0.1:1\n"
        f"a->b.enabled = true\na->b.topics = {p}\\..*\na->b.topics.exclude = .*audit\n"
    )
    # long enough for a and b to answer on a busy machine (the suite runs its clusters side by side)
    result = run_cli("srm", "check", "--config", str(path), "--connect", "--timeout", "10", cwd=tmp_path)
    # a cluster that does not answer is reported, and makes the exit status 1 (the config itself is valid)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "cluster a answers:" in out and "cluster b answers:" in out
    assert "cluster gone does not answer within 10s" in out
    # the cluster is shared with other tests: besides the flow's own topic, only heartbeats topics (always replicated)
    listed = out.split("would replicate now: ")[1].splitlines()[1:]
    names = {line.split()[0] for line in listed if line.startswith("    ")}
    assert {n for n in names if n != "heartbeats" and not n.endswith(".heartbeats")} == {f"{p}.orders"}
    assert f"    {p}.orders → a.{p}.orders" in out
    assert f"{p}.audit →" not in out


def test_secrets_never_leak_from_the_runtime_or_the_clis(clusters, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # GIVEN secrets through the environment, a file and written out, on PLAINTEXT clusters (librdkafka ignores
    # SASL and key passwords there, so replication runs as usual)
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    secret_env, secret_jaas, secret_file, secret_plain = (f"srm-leak-{secrets.token_hex(8)}" for _ in range(4))
    monkeypatch.setenv("SRM_LEAK_PASSWORD", secret_env)
    monkeypatch.setenv("SRM_LEAK_JAAS", secret_jaas)
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    (secret_dir / "b.properties").write_text(f"key.password = {secret_file}\n")
    work = tmp_path / "work"
    work.mkdir()
    topic, group = unique("leak"), unique("leakgroup")
    create_topic(a, topic, 2)
    produce_values(a, topic, 0, [f"v{i}".encode() for i in range(50)])
    produce_values(a, topic, 1, [f"w{i}".encode() for i in range(50)])
    consume_and_commit(a, group, topic, {0: 20, 1: 30})
    config = work / "srm.properties"
    config.write_text(
        "clusters = a, b\n"
        f"a.bootstrap.servers = {a}\n"
        f"b.bootstrap.servers = {b}\n"
        "a.sasl.password = ${env:SRM_LEAK_PASSWORD}\n"
        "a.consumer.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="srm" password="${env:SRM_LEAK_JAAS}";\n'
        f"b.ssl.key.password = ${{file:{secret_dir / 'b.properties'}:key.password}}\n"
        f"b.producer.sasl.password = {secret_plain}\n"
        f"a->b.enabled = true\na->b.topics = {topic}\n"
        "replication.factor = 1\nrefresh.topics.interval.seconds = 1\nrefresh.groups.interval.seconds = 1\n"
        "emit.checkpoints.interval.seconds = 1\nsync.group.offsets.interval.seconds = 1\n"
        "event.source.batching.window.ms = 50\nmetrics.aggregation.interval.seconds = 5\n"
    )
    outputs: list[str] = []

    def cli(*args: str) -> str:
        result = run_cli(*args, cwd=work, timeout=120)
        outputs.extend((result.stdout, result.stderr))
        assert result.returncode == 0, f"{args}: {result.stderr}"
        return result.stdout

    # WHEN srm run replicates, and every CLI shows what it knows
    with SrmRun(config, work, ("-v",), metrics=True) as run:
        wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        wait_group_synced(b, group, f"a.{topic}", 2)
        wait_log(run, "metrics", timeout=60)
        check = cli("srm", "check", "--config", str(config), "-v")
        cli("srm", "check", "--config", str(config), "--connect")
        cli("srm-control", "--local", "status", "--topics")
        cli("srm-control", "--local", "status", "--json")
        cli("srm-control", "--local", "config", "export")
        cli("srm-control", "--local", "config", "export", "--format", "yaml")
        cli("srm-control", "--local", "offsets", "--source", "a", "--target", "b", "--group", group)
        cli("srm", "metrics", "--once", "--json")
        logged = [
            r.value or b""
            for topic in (
                "srm-state.srm-a-b.internal",
                "srm-metrics.srm-a-b.internal",
                "srm-metrics.srm-a-b.aggregated.internal",
            )
            for r in read_partition(b, topic, 0)
        ]
        stored = [v for v in logged if v.startswith(b'{"p"')]  # the configuration's scopes, beside the state
    outputs.append(run.output())

    # THEN the check showed the secrets' keys, masked
    assert "sasl.password = ********" in check and "ssl.key.password = ********" in check
    # AND no byte srm wrote holds a secret: outputs, logs, .srm-local (raw metrics), the tables, the topics holding
    # them on the target (the state's and the raw metrics')
    written = [p for p in work.rglob("*") if p.is_file() and p != config]
    assert any("raw" in p.parts for p in written), "no raw metric files were written"
    assert stored, "no configuration in the state's topic"
    assert logged, "the state's topic is empty"
    for secret in (secret_env, secret_jaas, secret_file, secret_plain):
        for text in outputs:
            assert secret not in text
        assert not any(secret.encode() in value for value in logged)
        for path in written:
            assert secret.encode() not in path.read_bytes(), f"{secret} in {path}"
