"""Dead letters in S3 (the flow stack's dead-letter bucket): one object per record (:mod:`srm.core.dead_letters`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from srm.core.dead_letters import DeadLetter, DeadLetterError

__all__ = ["S3DeadLetters"]


class S3DeadLetters:
    """``s3://<bucket>/<prefix><source>-><target>/<topic>/<partition>/<offset>.json``; a redelivered batch puts
    the same keys again."""

    def __init__(self, client: Any, bucket: str, prefix: str = "dead-letters/") -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix
        self.location = f"s3://{bucket}/{prefix}"

    def write(self, letters: Sequence[DeadLetter]) -> None:
        now_ms = int(time.time() * 1000)
        for letter in letters:
            key = f"{self.prefix}{letter.name}"
            try:
                self._client.put_object(
                    Bucket=self.bucket, Key=key, Body=letter.to_json(now_ms), ContentType="application/json"
                )
            except (BotoCoreError, ClientError) as e:
                raise DeadLetterError(f"dead letter s3://{self.bucket}/{key} not written: {e}") from None
