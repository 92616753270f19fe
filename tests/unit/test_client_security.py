"""Client security: MSK IAM (Java keys → OAUTHBEARER with AWS's signer), TLS stores, Secrets Manager references with
a cache TTL. The signer runs for real with static credentials from the environment (botocore's own resolution) and
moto's STS; Secrets Manager is moto's."""

from __future__ import annotations

import base64
import datetime
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from moto import mock_aws

from srm.aws.secrets import secrets_manager_resolver
from srm.config.parsing import Properties
from srm.config.secrets import is_plain_secret
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.clients import admin_config, consumer_config, producer_config
from srm.kafka.msk_iam import MskIamSigner, region_of

WEST = "b-1.src.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.src.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"
EAST = "boot-xyz.c1.kafka-serverless.us-east-2.amazonaws.com:9098"
IAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "AWS_MSK_IAM",
    "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
    "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
}
OAUTH = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMOAuthBearerLoginModule required;",
    "sasl.login.callback.handler.class": "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
}


def config(extra: dict[str, str]) -> SrmConfig:
    props = {
        "clusters": "west, east",
        "west.bootstrap.servers": WEST,
        "east.bootstrap.servers": EAST,
        "west->east.enabled": "true",
        **extra,
    }
    return SrmConfig.from_properties(Properties.of(props))


@pytest.fixture
def static_credentials(monkeypatch: pytest.MonkeyPatch) -> str:
    """Static credentials in the environment, as botocore's default chain finds them (no profile, no metadata)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASRMTESTSTATIC01")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "srm-test-static-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-southeast-2")
    return "AKIASRMTESTSTATIC01"


def decoded(token: str) -> tuple[str, dict[str, list[str]]]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parsed = urlparse(url)
    return parsed.netloc, parse_qs(parsed.query)


# ---------------------------------------------------------------------------------------------------------------
# MSK IAM
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", [IAM, OAUTH], ids=["AWS_MSK_IAM", "OAUTHBEARER"])
@pytest.mark.parametrize("level", ["", "west.", "west.producer.", "west->east.producer."])
def test_java_iam_keys_at_any_level_become_oauthbearer_with_the_signer(variant: dict[str, str], level: str):
    # GIVEN the Java client's MSK IAM keys, unchanged, at one level of the hierarchy
    c = config({f"{level}{k}": v for k, v in variant.items()})
    flow = Flow("west", "east") if "->" in level else None
    # WHEN the west producer's librdkafka settings are built
    conf = producer_config(c, "west", flow, delivery_timeout_ms=30_000)
    # THEN it authenticates with OAUTHBEARER over TLS through a signer for the cluster's region; no Java key is left
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "OAUTHBEARER"
    assert conf["oauth_cb"] == MskIamSigner(region="eu-west-1")
    assert not any(k.startswith(("sasl.jaas", "sasl.client", "sasl.login")) for k in conf)
    assert "sasl.username" not in conf and "sasl.password" not in conf


def test_role_session_and_profile_options_of_the_jaas_line():
    jaas = (
        "software.amazon.msk.auth.iam.IAMOAuthBearerLoginModule required "
        'awsRoleArn="arn:aws:iam::123456789012:role/srm-east" awsRoleSessionName="srm" awsDebugCreds=true;'
    )
    c = config({**OAUTH, "east.sasl.jaas.config": jaas, "west.sasl.jaas.config": OAUTH["sasl.jaas.config"][:-1]
                + ' awsProfileName="msk-west";'})  # fmt: skip
    east = admin_config(c, "east")["oauth_cb"]
    west = admin_config(c, "west")["oauth_cb"]
    assert east == MskIamSigner(
        region="us-east-2", role_arn="arn:aws:iam::123456789012:role/srm-east", session_name="srm"
    )
    assert west == MskIamSigner(region="eu-west-1", profile="msk-west")
    assert (
        repr(east) == "<MSK IAM signer, region us-east-2, role arn:aws:iam::123456789012:role/srm-east (session srm)>"
    )


def test_configs_with_a_signer_compare_equal_so_cached_clients_are_reused():
    c = config(IAM)
    first = consumer_config(c, "west", None, group_id="g")
    assert first == consumer_config(c, "west", None, group_id="g")
    assert hash(first["oauth_cb"]) == hash(consumer_config(c, "west", None, group_id="g")["oauth_cb"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({**IAM, "security.protocol": "SSL"}, "needs security.protocol=SASL_SSL"),
        ({**IAM, "sasl.mechanism": "SCRAM-SHA-512"}, "needs sasl.mechanism=AWS_MSK_IAM or OAUTHBEARER"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}, "AWS_MSK_IAM needs sasl.jaas.config"),
        (
            {**IAM, "sasl.jaas.config": 'software.amazon.msk.auth.iam.IAMLoginModule required awsRegion="x";'},
            "unknown IAMLoginModule option 'awsRegion'",
        ),
        (
            {**IAM, "sasl.jaas.config": 'software.amazon.msk.auth.iam.IAMLoginModule required awsRoleAccessKeyId="A";'},
            "awsRoleAccessKeyId is not supported",
        ),
    ],
)
def test_iam_misconfigurations_are_one_line_errors_naming_the_key(extra: dict[str, str], message: str):
    c = config(extra)
    with pytest.raises(ConfigError, match=message) as e:
        admin_config(c, "west")
    assert "\n" not in str(e.value)


def test_region_from_bootstrap_hosts_and_arns():
    assert region_of(WEST) == "eu-west-1"
    assert region_of(EAST) == "us-east-2"
    assert region_of("arn:aws:kafka:ap-south-1:123456789012:cluster/src/abc-1") == "ap-south-1"
    assert region_of("b-1.x.y.c3.kafka.cn-north-1.amazonaws.com.cn:9098") == "cn-north-1"
    assert region_of("kafka-1.internal:9092") is None


def test_an_iam_jaas_line_is_no_secret_but_a_scram_one_is():
    assert not is_plain_secret("west.sasl.jaas.config", IAM["sasl.jaas.config"])
    assert is_plain_secret(
        "sasl.jaas.config", 'org.apache.kafka.common.security.scram.ScramLoginModule required password="p";'
    )


def test_the_signer_signs_connect_for_the_cluster_region_with_the_environment_credentials(static_credentials: str):
    # WHEN librdkafka asks the callback for a token
    before = time.time()
    token, expiry = MskIamSigner(region="eu-west-1")("")
    # THEN it is a presigned kafka-cluster:Connect URL for eu-west-1, signed with the environment's key, and it
    # expires in 15 minutes (librdkafka refreshes it before that)
    host, query = decoded(token)
    assert host == "kafka.eu-west-1.amazonaws.com"
    assert query["Action"] == ["kafka-cluster:Connect"]
    key, _, region, service, _ = query["X-Amz-Credential"][0].split("/")
    assert (key, region, service) == (static_credentials, "eu-west-1", "kafka-cluster")
    assert query["X-Amz-Expires"] == ["900"]
    assert before - 1 + 900 <= expiry <= time.time() + 900 + 1


def test_without_a_region_in_the_host_the_signer_uses_the_function_region(static_credentials: str):
    c = config({**IAM, "west.bootstrap.servers": "kafka-1.internal:9098"})
    signer = admin_config(c, "west")["oauth_cb"]
    assert signer.region is None
    host, query = decoded(signer("")[0])
    assert host == "kafka.ap-southeast-2.amazonaws.com"
    assert "/ap-southeast-2/kafka-cluster/" in query["X-Amz-Credential"][0]


def test_the_signer_assumes_the_role_of_awsRoleArn(static_credentials: str):
    with mock_aws():
        role = boto3.client("iam").create_role(RoleName="srm-msk", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        for signer in (
            MskIamSigner(region="eu-west-1", role_arn=role, session_name="srm"),
            MskIamSigner(region="eu-west-1", role_arn=role, external_id="ext-1", sts_region="eu-west-1"),
        ):
            _, query = decoded(signer("")[0])
            # the assumed role's temporary key (moto's ASIA…) with its session token, not the environment's key
            assert not query["X-Amz-Credential"][0].startswith(static_credentials)
            assert query["X-Amz-Credential"][0].startswith("ASIA")
            assert query["X-Amz-Security-Token"][0]


def test_the_signer_reads_a_named_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, static_credentials: str):
    credentials = tmp_path / "credentials"
    credentials.write_text("[msk-west]\naws_access_key_id = AKIASRMPROFILE0001\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    _, query = decoded(MskIamSigner(region="eu-west-1", profile="msk-west")("")[0])
    assert query["X-Amz-Credential"][0].startswith("AKIASRMPROFILE0001/")


# ---------------------------------------------------------------------------------------------------------------
# TLS stores
# ---------------------------------------------------------------------------------------------------------------
def self_signed(name: str) -> tuple[Any, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    return key, cert


def test_a_pkcs12_truststore_with_its_password_becomes_in_memory_pem(tmp_path: Path):
    _, ca = self_signed("srm-test-ca")
    store = tmp_path / "truststore.p12"
    store.write_bytes(
        pkcs12.serialize_key_and_certificates(
            None, None, None, [ca], serialization.BestAvailableEncryption(b"changeit")
        )
    )
    c = config({"west.ssl.truststore.location": str(store), "west.ssl.truststore.password": "changeit"})
    conf = admin_config(c, "west")
    assert conf["ssl.ca.pem"] == ca.public_bytes(serialization.Encoding.PEM).decode()
    assert not any(k.startswith("ssl.truststore") for k in conf)
    # a wrong password: one line with the openssl command that converts it
    c = config({"west.ssl.truststore.location": str(store), "west.ssl.truststore.password": "wrong"})
    with pytest.raises(ConfigError, match=r"openssl pkcs12 -in .*truststore.p12 -nokeys -out ca.pem"):
        admin_config(c, "west")


def test_jks_stores_get_the_keytool_command():
    c = config({"west.ssl.truststore.location": "/etc/kafka/truststore.jks", "west.ssl.truststore.password": "x"})
    with pytest.raises(ConfigError, match=r"cannot read JKS truststores; convert it to PEM: keytool -importkeystore"):
        admin_config(c, "west")
    c = config({"west.ssl.keystore.location": "/etc/kafka/keystore.jks", "west.ssl.keystore.password": "x"})
    with pytest.raises(ConfigError, match=r"convert the JKS keystore: keytool -importkeystore -srckeystore"):
        admin_config(c, "west")


def test_pem_files_and_in_memory_pem_from_secret_references(monkeypatch: pytest.MonkeyPatch):
    key, cert = self_signed("srm-client")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    monkeypatch.setenv("SRM_TEST_KEY", key_pem)
    c = config(
        {
            "west.security.protocol": "SSL",
            "west.ssl.truststore.location": "/etc/kafka/ca.pem",
            "west.ssl.keystore.type": "PEM",
            "west.ssl.keystore.location": "/etc/kafka/client.pem",
            "east.security.protocol": "SSL",
            "east.ssl.keystore.type": "PEM",
            "east.ssl.keystore.key": "${env:SRM_TEST_KEY}",
            "east.ssl.keystore.certificate.chain": cert.public_bytes(serialization.Encoding.PEM).decode(),
        }
    )
    west = admin_config(c, "west")
    assert (west["ssl.ca.location"], west["ssl.key.location"], west["ssl.certificate.location"]) == (
        "/etc/kafka/ca.pem",
        "/etc/kafka/client.pem",
        "/etc/kafka/client.pem",
    )
    east = admin_config(c, "east")
    assert east["ssl.key.pem"] == key_pem and "BEGIN CERTIFICATE" in east["ssl.certificate.pem"]


# ---------------------------------------------------------------------------------------------------------------
# Secrets Manager
# ---------------------------------------------------------------------------------------------------------------
def test_secrets_manager_values_are_cached_for_the_ttl_then_rotation_shows():
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        sm.create_secret(Name="AmazonMSK_srm-west", SecretString=json.dumps({"username": "srm", "password": "v1"}))
        other = boto3.client("secretsmanager", region_name="us-west-2")
        arn = other.create_secret(Name="AmazonMSK_srm-east", SecretString="east-pw")["ARN"]
        resolve = secrets_manager_resolver("eu-west-1", max_age=1)
        assert resolve("secretsmanager", "AmazonMSK_srm-west:password") == "v1"
        assert resolve("secretsmanager", arn) == "east-pw"  # an ARN is read in its own region
        # WHEN the secret is rotated THEN the cached value serves until the TTL, the new one after it
        sm.put_secret_value(
            SecretId="AmazonMSK_srm-west", SecretString=json.dumps({"username": "srm", "password": "v2"})
        )
        assert resolve("secretsmanager", "AmazonMSK_srm-west:password") == "v1"
        time.sleep(1.2)
        assert resolve("secretsmanager", "AmazonMSK_srm-west:password") == "v2"
        with pytest.raises(ConfigError, match="cannot read secret missing") as e:
            resolve("secretsmanager", "missing")
        assert "\n" not in str(e.value)
        with pytest.raises(ConfigError, match="has no JSON key 'token'"):
            resolve("secretsmanager", "AmazonMSK_srm-west:token")


def test_a_rotated_scram_password_changes_the_client_config():
    """The client cache compares configurations: a rotated password builds new clients."""
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="eu-west-1")
        sm.create_secret(Name="srm-west", SecretString=json.dumps({"username": "srm", "password": "v1"}))
        c = config(
            {
                "west.sasl.mechanism": "SCRAM-SHA-512",
                "west.security.protocol": "SASL_SSL",
                "west.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="${secretsmanager:srm-west:username}" password="${secretsmanager:srm-west:password}";',
            }
        )
        resolve = secrets_manager_resolver("eu-west-1", max_age=0)
        first = admin_config(c, "west", resolver=resolve)
        assert (first["sasl.username"], first["sasl.password"], first["sasl.mechanism"]) == (
            "srm",
            "v1",
            "SCRAM-SHA-512",
        )
        sm.put_secret_value(SecretId="srm-west", SecretString=json.dumps({"username": "srm", "password": "v2"}))
        assert admin_config(c, "west", resolver=resolve)["sasl.password"] == "v2"
