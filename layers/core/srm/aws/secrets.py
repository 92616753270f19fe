"""Secrets Manager references (``${secretsmanager:<id>[:<json key>]}``) through Powertools' parameters utility: each
secret is cached for ``max_age`` seconds, so a rotated secret is picked up without a redeploy (the Kafka client cache
then sees a changed configuration and builds new clients)."""

from __future__ import annotations

import json

import boto3
from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.config import Config

from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.errors import ConfigError

__all__ = ["DEFAULT_SECRETS_MAX_AGE", "secrets_manager_resolver"]

DEFAULT_SECRETS_MAX_AGE = 300.0


def secrets_manager_resolver(region: str, max_age: float = DEFAULT_SECRETS_MAX_AGE) -> SecretResolver:
    """Secret references: ``${secretsmanager:<id>[:<json key>]}`` besides ``${env:…}`` and ``${file:…}``. A secret
    named by ARN is read in the ARN's region (a target cluster's secret may live in another region)."""
    providers: dict[str, SecretsProvider] = {}

    def provider(secret_region: str) -> SecretsProvider:
        if secret_region not in providers:
            client = boto3.client(
                "secretsmanager", region_name=secret_region, config=Config(retries={"mode": "standard"})
            )
            providers[secret_region] = SecretsProvider(boto3_client=client)
        return providers[secret_region]

    def resolve(kind: str, path: str) -> str:
        if kind != "secretsmanager":
            return default_secret_resolver(kind, path)
        secret_id, json_key = _secret_ref(path)
        secret_region = secret_id.split(":")[3] if secret_id.startswith("arn:") else region
        try:
            value = provider(secret_region).get(secret_id, max_age=int(max_age))
        except GetParameterError as e:  # its text is the AWS error (code and message), never a value
            raise ConfigError(f"${{secretsmanager:{path}}}: cannot read secret {secret_id}: {_reason(e)}") from None
        if not isinstance(value, str):
            raise ConfigError(f"${{secretsmanager:{path}}}: secret {secret_id} is binary; store it as a string")
        if not json_key:
            return value
        try:
            return str(json.loads(value)[json_key])
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"${{secretsmanager:{path}}}: secret has no JSON key {json_key!r}") from None

    return resolve


def _reason(e: GetParameterError) -> str:
    cause = e.__cause__ or e.__context__
    return str(cause or e).splitlines()[0]


def _secret_ref(path: str) -> tuple[str, str]:
    """``name[:json-key]`` or ``arn:aws:secretsmanager:region:account:secret:name[:json-key]``."""
    parts = path.split(":")
    n = 7 if path.startswith("arn:") else 1
    return ":".join(parts[:n]), ":".join(parts[n:])
