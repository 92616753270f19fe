"""srm.config.clients: the Kafka client values checked offline — bootstrap.servers, sasl.mechanism and the JAAS login
module — refused with key and file:line wherever they are set, and never quoting a JAAS line."""

from __future__ import annotations

import pytest

from tests.unit.config_files import BASE, config_error, load

SECRET = "hunter2-not-shown"
SCRAM = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{SECRET}";'


@pytest.mark.parametrize(
    "value", ["a:9092", "a:1,b:65535", " a:1 , b:2 ", "[::1]:9092", "10.0.0.1:9092", "SASL_SSL://b-1.x:9096"]
)
def test_config_bootstrap_servers_host_port_entries_are_accepted(value):
    load({**BASE, "b.bootstrap.servers": value})


@pytest.mark.parametrize("value", ["localhost:abc", "localhost", "a:0", "a:65536", "a:1,b", "::1:9092", "a b:1"])
def test_config_bootstrap_servers_not_host_port_is_refused_naming_key_line_and_entry(value):
    error = config_error({**BASE, "b.bootstrap.servers": value})

    assert str(error).startswith("mm2.properties:3: b.bootstrap.servers: ")
    assert "host:port" in str(error)


@pytest.mark.parametrize(
    "line",
    ["a.sasl.mechanism = SCRAMSHA512", "sasl.mechanism = scram-sha-512", "b.consumer.sasl.mechanism = PLAINTEXT"],
)
def test_config_unknown_sasl_mechanism_is_refused_with_a_suggestion(line):
    error = config_error(BASE, line)

    assert str(error).startswith(f"mm2.properties:5: {line.split(' = ')[0]}: unknown SASL mechanism")
    assert "did you mean" in str(error)
    assert error.key == line.split(" = ")[0]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"])
def test_config_known_sasl_mechanisms_are_accepted(mechanism):
    load(BASE, f"a->b.producer.sasl.mechanism = {mechanism}")


@pytest.mark.parametrize(
    "jaas",
    [
        'com.example.FancyLoginModule required username="u" password="p";',
        f"{SECRET} required;",
        SECRET,
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
    ],
)
def test_config_a_login_module_srm_cannot_use_is_refused_without_quoting_the_line(jaas):
    error = config_error(BASE, "a.sasl.mechanism = PLAIN", f"a.producer.sasl.jaas.config = {jaas}")

    assert str(error).startswith("mm2.properties:6: a.producer.sasl.jaas.config: ")
    assert SECRET not in str(error) and "password" not in str(error)


def test_config_an_unknown_login_module_class_is_named():
    error = config_error(BASE, 'a.sasl.jaas.config = com.example.FancyLoginModule required username="u";')

    assert "unknown login module: 'com.example.FancyLoginModule'" in str(error)


@pytest.mark.parametrize(
    ("lines", "key"),
    [
        (["a.sasl.mechanism = PLAIN", f"a.sasl.jaas.config = {SCRAM}"], "a.sasl.jaas.config"),
        # the mechanism set for one role only: that role's clients are checked too
        (["sasl.mechanism = SCRAM-SHA-512", "a.consumer.sasl.mechanism = PLAIN", f"sasl.jaas.config = {SCRAM}"], None),
        # no mechanism with SASL: Kafka's default, GSSAPI
        (["a.security.protocol = SASL_SSL", f"a.sasl.jaas.config = {SCRAM}"], "a.sasl.jaas.config"),
    ],
)
def test_config_a_login_module_for_another_mechanism_is_refused(lines, key):
    error = config_error(BASE, *lines)

    assert "authenticates with sasl.mechanism" in str(error)
    assert error.key == (key or "sasl.jaas.config")
    assert SECRET not in str(error)


@pytest.mark.parametrize(
    "lines",
    [
        ["sasl.mechanism = SCRAM-SHA-512", f"a.sasl.jaas.config = {SCRAM}"],
        [
            "a.sasl.mechanism = AWS_MSK_IAM",
            "a.sasl.jaas.config = software.amazon.msk.auth.iam.IAMLoginModule required;",
        ],
        [
            "a.sasl.mechanism = OAUTHBEARER",
            "a.sasl.jaas.config = software.amazon.msk.auth.iam.IAMOAuthBearerLoginModule required;",
        ],
        # without SASL the mechanism is not used: nothing to pair
        [f"a.sasl.jaas.config = {SCRAM}"],
        # references are read when a client is built, and checked there
        ["a.sasl.mechanism = PLAIN", "a.sasl.jaas.config = ${secretsmanager:srm/a:jaas}"],
        ["a.sasl.mechanism = ${env:MECHANISM}", f"a.sasl.jaas.config = {SCRAM}"],
    ],
)
def test_config_a_login_module_matching_its_mechanism_is_accepted(lines):
    load(BASE, *lines)
