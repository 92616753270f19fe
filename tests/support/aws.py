"""The AWS the AWS-adapter tests (marker ``aws_adapter``) run on: moto in this process by default, or the emulator
at ``SRM_TEST_AWS_ENDPOINT`` (LocalStack, started by ``make test-localstack``: tests/support/localstack.py).

Tests create their clients inside :func:`aws` as they would inside ``mock_aws()``; the same assertions then run on
both emulators.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator

import boto3
from moto import mock_aws

__all__ = ["ENDPOINT_ENV", "aws", "emulator_endpoint"]

ENDPOINT_ENV = "SRM_TEST_AWS_ENDPOINT"
_accounts = itertools.count(100_000_000_001)  # the emulator is fresh per run (make test-localstack)


def emulator_endpoint() -> str | None:
    return os.environ.get(ENDPOINT_ENV) or None


@contextlib.contextmanager
def aws() -> Iterator[None]:
    """An empty AWS account for the duration: moto's fresh state, or a fresh account of the emulator."""
    endpoint = emulator_endpoint()
    if endpoint is None:
        with mock_aws():
            yield
        return
    # LocalStack keys its state by the account, which a 12-digit access key id names: a new account per use keeps
    # tests as isolated as moto's fresh state (it has no reset in its free edition).
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID")}
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ["AWS_ACCESS_KEY_ID"] = str(next(_accounts))
    boto3.DEFAULT_SESSION = None  # it caches the credentials it found first
    try:
        yield
    finally:
        boto3.DEFAULT_SESSION = None
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
