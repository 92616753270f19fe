"""AWS MSK IAM authentication for librdkafka: the Java client's ``sasl.jaas.config`` for ``aws-msk-iam-auth``
(``IAMLoginModule`` with ``AWS_MSK_IAM``, or ``IAMOAuthBearerLoginModule`` with ``OAUTHBEARER``) becomes
SASL/OAUTHBEARER with an ``oauth_cb`` that signs a token with AWS's ``aws-msk-iam-sasl-signer-python``.

The callback is a frozen dataclass: configurations holding it compare and hash by value, so a client cache sees the
same configuration on every invocation, and its repr names region and role, never a credential.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
from botocore.credentials import CredentialProvider, Credentials

from srm.config.clients import IAM_LOGIN_MODULES

__all__ = ["IAM_LOGIN_MODULES", "MskIamSigner", "is_iam_jaas", "region_of", "signer_from_jaas"]

# b-1.name.abc123.c2.kafka.eu-west-1.amazonaws.com, boot-abc.c1.kafka-serverless.us-east-1.amazonaws.com (also the
# .amazonaws.com.cn partition), and a cluster ARN arn:aws:kafka:eu-west-1:123456789012:cluster/name/uuid.
_HOST_REGION = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com")
_ARN_REGION = re.compile(r"^arn:aws[\w-]*:kafka:([a-z]{2}(?:-[a-z]+)+-\d+):")
_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
# Options of aws-msk-iam-auth that tune the Java library's own retries and logging: nothing to do here.
_NO_EFFECT = frozenset({"awsDebugCreds", "awsMaxRetries", "awsMaxBackOffTimeMs", "awsAddDefaultProviders"})
_SUPPORTED = frozenset({"awsRoleArn", "awsRoleSessionName", "awsRoleExternalId", "awsStsRegion", "awsProfileName"})
DEFAULT_SESSION_NAME = "MSKSASLDefaultSession"  # the signer's (and the Java library's) default


def is_iam_jaas(jaas: str) -> bool:
    return any(jaas.strip().startswith(module) for module in IAM_LOGIN_MODULES)


def region_of(bootstrap_or_arn: str) -> str | None:
    """The AWS region in an MSK bootstrap host (provisioned or serverless) or cluster ARN; None for other hosts."""
    m = _ARN_REGION.match(bootstrap_or_arn.strip()) or _HOST_REGION.search(bootstrap_or_arn)
    return m.group(1) if m else None


@dataclass(frozen=True)
class MskIamSigner:
    """librdkafka's ``oauth_cb``: returns a fresh MSK IAM token and its expiry (seconds since the epoch); librdkafka
    calls it again before the token expires (at 80 % of its 15-minute lifetime)."""

    region: str | None  # None: the function's own region, read by botocore when a token is signed
    role_arn: str | None = None
    session_name: str = DEFAULT_SESSION_NAME
    external_id: str | None = None
    sts_region: str | None = None
    profile: str | None = None

    def __call__(self, _oauthbearer_config: str = "") -> tuple[str, float]:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider as signer

        region = self.region or _default_region()
        if self.role_arn and (self.external_id or self.sts_region):
            token, expiry_ms = signer.generate_auth_token_from_credentials_provider(region, _AssumedRole(self))
        elif self.role_arn:
            token, expiry_ms = signer.generate_auth_token_from_role_arn(region, self.role_arn, self.session_name)
        elif self.profile:
            token, expiry_ms = signer.generate_auth_token_from_profile(region, self.profile)
        else:
            token, expiry_ms = signer.generate_auth_token(region)
        return token, expiry_ms / 1000.0

    def describe(self) -> str:
        parts = [f"region {self.region or f'{_default_region()} (the function region)'}"]
        if self.role_arn:
            parts.append(f"role {self.role_arn} (session {self.session_name})")
        if self.profile:
            parts.append(f"profile {self.profile}")
        return f"<MSK IAM signer, {', '.join(parts)}>"

    def __repr__(self) -> str:
        return self.describe()

    __str__ = __repr__


def _default_region() -> str:
    region: str | None = botocore.session.get_session().get_config_variable("region")
    return region or "us-east-1"


class _AssumedRole(CredentialProvider):  # type: ignore[misc]
    """awsRoleArn with awsRoleExternalId or awsStsRegion, which the signer's own role path does not take."""

    METHOD = "srm-msk-iam-assume-role"

    def __init__(self, signer: MskIamSigner) -> None:
        super().__init__()
        self.signer = signer

    def load(self) -> Credentials:
        s = self.signer
        args: dict[str, Any] = {"RoleArn": s.role_arn, "RoleSessionName": s.session_name}
        if s.external_id:
            args["ExternalId"] = s.external_id
        c = boto3.client("sts", region_name=s.sts_region).assume_role(**args)["Credentials"]
        return Credentials(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"], method=self.METHOD)


def signer_from_jaas(jaas: str, bootstrap: str | None, where: str) -> MskIamSigner:
    """The signer an IAM ``sasl.jaas.config`` line asks for; ``where`` names the key in errors (ValueError)."""
    options: dict[str, str] = {}
    for key, quoted, bare in _OPTION.findall(jaas):
        options[key] = quoted if quoted or not bare else bare
    for key in options:
        if key in ("awsRoleAccessKeyId", "awsRoleSecretAccessKey"):
            raise ValueError(
                f"{where}: {key} is not supported (it would put an access key into the configuration); give the "
                "function's role permission to assume awsRoleArn, or use awsProfileName"
            )
        if key not in _SUPPORTED and key not in _NO_EFFECT:
            raise ValueError(
                f"{where}: unknown IAMLoginModule option {key!r} (known: {', '.join(sorted(_SUPPORTED | _NO_EFFECT))})"
            )
    if options.get("awsRoleArn") and options.get("awsProfileName"):
        raise ValueError(f"{where}: set awsRoleArn or awsProfileName, not both")
    return MskIamSigner(
        region=region_of(bootstrap or ""),
        role_arn=options.get("awsRoleArn") or None,
        session_name=options.get("awsRoleSessionName") or DEFAULT_SESSION_NAME,
        external_id=options.get("awsRoleExternalId") or None,
        sts_region=options.get("awsStsRegion") or None,
        profile=options.get("awsProfileName") or None,
    )
