"""The Kafka client values SRM can check without connecting: ``bootstrap.servers``, ``sasl.mechanism`` and the login
module of ``sasl.jaas.config``, wherever they are set (any cluster, role, side or flow prefix), so a typo is refused
with its ``file:line`` before a client is built. Values that are secret references (``${…}``) are read only when a
client is built, and checked there."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from srm.config.keys import CLIENT_ROLES, client_properties
from srm.config.parsing import Properties
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = ["IAM_LOGIN_MODULES", "SASL_MECHANISMS", "validate_client_values"]

SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM")
IAM_LOGIN_MODULES = (
    "software.amazon.msk.auth.iam.IAMLoginModule",
    "software.amazon.msk.auth.iam.IAMOAuthBearerLoginModule",
)
# The login modules whose credentials SRM hands librdkafka, and the mechanisms each authenticates with. (The MSK IAM
# modules are translated too; srm.kafka.librdkafka checks their mechanism and protocol as it builds the signer.)
_CREDENTIAL_MODULES: dict[str, tuple[str, ...]] = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
# Java's other Kafka login modules: known, but their JAAS options have no librdkafka translation.
_UNTRANSLATED = {
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "sasl.oauthbearer.*",
    "com.sun.security.auth.module.Krb5LoginModule": "sasl.kerberos.*",
}
_JAAS = re.compile(r"\s*(?P<module>\S+)\s+(?:required|requisite|sufficient|optional)(?:\s|;|$)")
_CLASS_NAME = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+LoginModule$")
_ENDPOINT = re.compile(r"^(?:[A-Za-z_]+://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d{1,5})$")
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_SUPPORTED = "PlainLoginModule, ScramLoginModule, IAMLoginModule, IAMOAuthBearerLoginModule"


def validate_client_values(props: Properties, clusters: Iterable[str], flows: Iterable[Flow]) -> None:
    """Refuse a malformed ``bootstrap.servers``, an unknown ``sasl.mechanism`` or login module, and a login module
    that does not authenticate with the mechanism its clients use. A JAAS line's value is never quoted: it may hold
    a password."""
    for key, value in props.items():
        if "${" in value:
            continue
        if _client_key(key, "bootstrap.servers"):
            _check_bootstrap(props, key, value)
        elif _client_key(key, "sasl.mechanism"):
            _check_mechanism(props, key, value)
        elif _client_key(key, "sasl.jaas.config"):
            _login_module(props, key, value)
    if not any(_client_key(k, "sasl.jaas.config") and "${" not in v for k, v in props.items()):
        return  # nothing to pair: skip resolving every client's settings
    for alias in clusters:
        for role in CLIENT_ROLES:
            _check_pair(props, client_properties(props, alias, role))
    for flow in flows:
        for alias in flow:
            for role in CLIENT_ROLES:
                _check_pair(props, client_properties(props, alias, role, flow=flow))


def _client_key(key: str, name: str) -> bool:
    return key == name or key.endswith("." + name)


def _fail(props: Properties, key: str, message: str) -> ConfigError:
    return ConfigError(f"{key}: {message}", key=key, origin=props.origin(key))


def _check_bootstrap(props: Properties, key: str, value: str) -> None:
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        m = _ENDPOINT.match(entry)
        if not m or not 1 <= int(m["port"]) <= 65535:
            raise _fail(
                props, key, f"{entry!r} is not host:port (a port from 1 to 65535; an IPv6 address in [brackets])"
            )


def _check_mechanism(props: Properties, key: str, value: str) -> None:
    mechanism = value.strip()
    if mechanism in SASL_MECHANISMS:
        return
    hint = difflib.get_close_matches(mechanism.upper(), SASL_MECHANISMS, n=1, cutoff=0.6)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    raise _fail(props, key, f"unknown SASL mechanism {mechanism!r} ({', '.join(SASL_MECHANISMS)}){suggestion}")


def _login_module(props: Properties, key: str, value: str) -> str:
    """The login module of a JAAS line (``<module> required <options>;``), if SRM can use it."""
    m = _JAAS.match(value)
    if not m:
        raise _fail(props, key, f"expected '<login module> required <options>;' with one of {_SUPPORTED}")
    module = m["module"]
    if module in _CREDENTIAL_MODULES or module in IAM_LOGIN_MODULES:
        return module
    if module in _UNTRANSLATED:
        raise _fail(
            props,
            key,
            f"{module} is not translated: srm reads sasl.jaas.config only for {_SUPPORTED}; remove it and set "
            f"librdkafka's {_UNTRANSLATED[module]} settings instead",
        )
    named = repr(module) if _CLASS_NAME.match(module) else "its login module"  # anything else may be a password
    raise _fail(props, key, f"unknown login module: {named} is not one of {_SUPPORTED} (with its package)")


def _check_pair(props: Properties, settings: dict[str, tuple[str, str]]) -> None:
    """The login module authenticates with the mechanism the client uses (Kafka's default: GSSAPI)."""
    jaas = settings.get("sasl.jaas.config")
    if jaas is None or "${" in jaas[0]:
        return
    protocol = settings.get("security.protocol", ("", ""))[0].strip().upper()
    mechanism, mechanism_key = settings.get("sasl.mechanism", ("GSSAPI", ""))
    if "${" in mechanism or not (mechanism_key or protocol in _SASL_PROTOCOLS):
        return
    allowed = _CREDENTIAL_MODULES.get(_login_module(props, jaas[1], jaas[0]))
    if allowed is not None and mechanism.strip() not in allowed:
        given = f"{mechanism_key} = {mechanism.strip()}" if mechanism_key else "sasl.mechanism is not set (GSSAPI)"
        raise _fail(
            props,
            jaas[1],
            f"{jaas[0].split(None, 1)[0].rsplit('.', 1)[-1]} authenticates with sasl.mechanism "
            f"{' or '.join(allowed)}, but {given}",
        )
