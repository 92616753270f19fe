"""Secret handling in one place: which keys hold secrets, what counts as a secret written out (rather than a
reference to one), masking for display, and resolving references (``${env:NAME}``, ``${file:path[:key]}``, and on AWS
``${secretsmanager:id[:key]}`` through :func:`srm.app.secrets_manager_resolver`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

from srm.config.parsing import parse_properties_text
from srm.errors import ConfigError

__all__ = [
    "MASK",
    "SENSITIVE_KEYS",
    "SecretResolver",
    "default_secret_resolver",
    "is_plain_secret",
    "is_sensitive",
    "mask_secrets",
    "resolve_refs",
]

SecretResolver = Callable[[str, str], str]  # (provider, path) -> value

MASK = "********"
# Values that must never be logged, exported in clear, or stored in the config table.
SENSITIVE_KEYS = frozenset(
    {
        "sasl.password",
        "sasl.jaas.config",
        "sasl.oauthbearer.client.secret",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "ssl.key.pem",
        "ssl.keystore.key",  # Java clients: the PEM private key itself
    }
)
_REF = re.compile(r"\$\{(?P<provider>[a-zA-Z]+):(?P<path>[^}]*)\}")
_WHOLE_REF = re.compile(r"^\$\{[a-zA-Z]+:[^}]*\}$")
_IAM_JAAS = re.compile(
    r"^\s*software\.amazon\.msk\.auth\.iam\.IAM(?:OAuthBearer)?LoginModule\s+required\b(?![^;]*Secret)"
)


def is_sensitive(key: str) -> bool:
    """A key whose value is a secret, with or without a scope or role prefix (``a.producer.sasl.password``)."""
    return any(key == s or key.endswith("." + s) for s in SENSITIVE_KEYS)


def is_plain_secret(key: str, value: str) -> bool:
    """A secret written out, not a reference to one (``${env:…}``, ``${secretsmanager:…}``). An MSK IAM login
    module line holds no secret (role and profile names at most), so it may stay in the config table."""
    if _IAM_JAAS.match(value) and (key == "sasl.jaas.config" or key.endswith(".sasl.jaas.config")):
        return False
    return is_sensitive(key) and bool(value) and not _WHOLE_REF.match(value.strip())


def mask_secrets(props: Mapping[str, str]) -> dict[str, str]:
    """Secret values masked, unless they are references (``${env:…}``, ``${secretsmanager:…}``)."""
    return {k: (MASK if is_plain_secret(k, v) else v) for k, v in props.items()}


def default_secret_resolver(provider: str, path: str) -> str:
    if provider == "env":
        try:
            return os.environ[path]
        except KeyError:
            raise ConfigError(f"${{env:{path}}}: environment variable {path} is not set") from None
    if provider == "file":
        file_path, _, key = path.rpartition(":")
        if not file_path:
            file_path, key = path, ""
        try:
            with open(file_path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"${{file:{path}}}: cannot read {file_path}: {e.strerror}") from None
        except UnicodeDecodeError as e:  # not decode_text's message: the offending byte would be part of a secret
            raise ConfigError(f"${{file:{path}}}: {file_path} is not UTF-8 text (at offset {e.start})") from None
        if not key:
            return text.strip()
        values = parse_properties_text(text, file_path)
        if key not in values:
            raise ConfigError(f"${{file:{path}}}: {file_path} has no key {key!r}")
        return values[key]
    raise ConfigError(f"${{{provider}:{path}}}: unknown secret provider {provider!r} (env, file, secretsmanager)")


def resolve_refs(value: str, resolver: SecretResolver) -> str:
    return _REF.sub(lambda m: resolver(m["provider"], m["path"]), value)
