"""MM2's Java client settings as librdkafka takes them.

Configuration arrives with MM2's Java client names; :func:`librdkafka_config` translates the ones librdkafka
spells differently (``sasl.jaas.config``, PEM truststores) and resolves secret references (``${env:NAME}``,
``${file:/path:key}``, ``${secretsmanager:id[:json-key]}``) at the last moment, so secrets never sit in the
config table or in logs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from srm.config.secrets import SecretResolver, default_secret_resolver, resolve_refs
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.kafka.msk_iam import is_iam_jaas, signer_from_jaas

__all__ = ["librdkafka_config", "pkcs12_certificates_pem"]

_JAAS_KV = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# Java-client settings with no librdkafka meaning: dropped rather than rejected, so mm2.properties work as-is.
_JAVA_ONLY = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
        "client.dns.lookup",
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.truststore.type",
        "ssl.keystore.type",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
        "metric.reporters",
        "auto.include.jmx.reporter",
        "default.api.timeout.ms",
        "max.block.ms",
        "buffer.memory",
    }
)
# Read by the translation below rather than passed on.
_TRANSLATED = frozenset(
    {
        "sasl.jaas.config",
        "sasl.mechanism",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "ssl.keystore.type",
    }
)
# The Java client's in-memory PEM settings and librdkafka's names for them (``${secretsmanager:…}`` values).
_JAVA_PEM = {
    "ssl.keystore.key": "ssl.key.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.truststore.certificates": "ssl.ca.pem",
}


def librdkafka_config(
    settings: Mapping[str, tuple[str, str]],
    config: SrmConfig,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, Any]:
    """Translate resolved client settings (``{key: (value, defining key)}``) into a librdkafka config; MSK IAM
    settings become OAUTHBEARER with an ``oauth_cb`` (:class:`MskIamSigner`), the one value that is not a string."""
    out: dict[str, Any] = {}
    values: dict[str, str] = {}
    for key, (raw, defined_by) in settings.items():
        try:
            values[key] = resolve_refs(raw, resolver)
        except ConfigError as e:
            raise ConfigError(
                f"{defined_by}: {e}", key=defined_by, origin=config.properties.origin(defined_by)
            ) from None

    def error(key: str, message: str) -> ConfigError:
        defined_by = settings[key][1] if key in settings else key
        return ConfigError(f"{defined_by}: {message}", key=defined_by, origin=config.properties.origin(defined_by))

    for key, value in values.items():
        if key in _TRANSLATED:
            continue
        if key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        elif key in _JAVA_PEM:
            out[_JAVA_PEM[key]] = value
        elif key not in _JAVA_ONLY:
            out[key] = value
    mechanism = values.get("sasl.mechanism", "").strip().upper()
    jaas = values.get("sasl.jaas.config")
    if jaas is not None and is_iam_jaas(jaas):
        if mechanism not in ("AWS_MSK_IAM", "OAUTHBEARER"):
            raise error("sasl.jaas.config", "the MSK IAM login module needs sasl.mechanism=AWS_MSK_IAM or OAUTHBEARER")
        if values.get("security.protocol", "").strip().upper() != "SASL_SSL":
            raise error("sasl.jaas.config", "MSK IAM authentication needs security.protocol=SASL_SSL")
        try:
            out["oauth_cb"] = signer_from_jaas(jaas, values.get("bootstrap.servers"), "")
        except ValueError as e:
            raise error("sasl.jaas.config", str(e).lstrip(": ")) from None
        out["sasl.mechanism"] = "OAUTHBEARER"
    elif mechanism == "AWS_MSK_IAM":
        raise error(
            "sasl.mechanism",
            "AWS_MSK_IAM needs sasl.jaas.config = software.amazon.msk.auth.iam.IAMLoginModule required;",
        )
    else:
        if "sasl.mechanism" in values:
            out["sasl.mechanism"] = values["sasl.mechanism"]
        if jaas is not None:
            _jaas_credentials(jaas, out, error)
    if "ssl.truststore.location" in values:
        _truststore(values, out, error)
    if "ssl.keystore.location" in values:
        _keystore(values, out, error)
    return out


def _jaas_credentials(jaas: str, out: dict[str, Any], error: Callable[[str, str], ConfigError]) -> None:
    """PLAIN/SCRAM credentials of a Java login module line."""
    creds = dict(_JAAS_KV.findall(jaas))
    if "username" not in creds or "password" not in creds:
        raise error("sasl.jaas.config", 'expected username="…" password="…" in sasl.jaas.config')
    out.setdefault("sasl.username", creds["username"])
    out.setdefault("sasl.password", creds["password"])


def _store_type(values: Mapping[str, str], kind: str, path: str) -> str:
    """A Java store's type: its ``ssl.<kind>.type``, else told by the file name (Java's default is JKS)."""
    declared = values.get(f"ssl.{kind}.type", "").strip().upper()
    if declared:
        return "PKCS12" if declared == "P12" else declared
    lower = path.lower()
    if lower.endswith((".pem", ".crt", ".cer")):
        return "PEM"
    if lower.endswith((".p12", ".pfx")):
        return "PKCS12"
    return "JKS"


def _truststore(values: Mapping[str, str], out: dict[str, Any], error: Callable[[str, str], ConfigError]) -> None:
    path = values["ssl.truststore.location"]
    kind = _store_type(values, "truststore", path)
    if kind == "PEM":
        out.setdefault("ssl.ca.location", path)
    elif kind == "PKCS12":
        password = values.get("ssl.truststore.password")
        try:
            out.setdefault("ssl.ca.pem", pkcs12_certificates_pem(path, password))
        except (OSError, ValueError) as e:
            reason = e.strerror if isinstance(e, OSError) else "wrong ssl.truststore.password or not a PKCS#12 file"
            raise error(
                "ssl.truststore.location",
                f"cannot read the PKCS#12 truststore {path} ({reason}); or convert it to PEM yourself: "
                f"openssl pkcs12 -in {path} -nokeys -out ca.pem, then set ssl.truststore.location=ca.pem",
            ) from None
    else:
        raise error(
            "ssl.truststore.location",
            f"librdkafka cannot read {kind} truststores; convert it to PEM: keytool -importkeystore -srckeystore "
            f"{path} -destkeystore truststore.p12 -deststoretype PKCS12 && openssl pkcs12 -in truststore.p12 -nokeys "
            "-out ca.pem, then set ssl.truststore.location=ca.pem",
        )


def _keystore(values: Mapping[str, str], out: dict[str, Any], error: Callable[[str, str], ConfigError]) -> None:
    path = values["ssl.keystore.location"]
    kind = _store_type(values, "keystore", path)
    if kind == "PEM":  # one file with the key and the certificate chain
        out.pop("ssl.keystore.location", None)
        out.setdefault("ssl.key.location", path)
        out.setdefault("ssl.certificate.location", path)
    elif kind != "PKCS12":  # librdkafka reads PKCS#12 keystores itself (ssl.keystore.location/.password)
        raise error(
            "ssl.keystore.location",
            f"librdkafka reads PKCS#12 or PEM keystores only; convert the {kind} keystore: keytool -importkeystore "
            f"-srckeystore {path} -destkeystore keystore.p12 -deststoretype PKCS12, then set "
            "ssl.keystore.location=keystore.p12",
        )


def pkcs12_certificates_pem(path: str, password: str | None) -> str:
    """The certificates of a PKCS#12 file as PEM (a Java truststore converted for ``ssl.ca.pem``)."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    with open(path, "rb") as f:
        data = f.read()
    store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    if not certs:
        raise ValueError("no certificates")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)
