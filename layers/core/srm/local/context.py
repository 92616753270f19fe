"""The Lambda context object, as the local runtime hands it to the very handlers Lambda runs."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = ["LocalContext"]


@dataclass
class LocalContext:
    """The part of Lambda's context object handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000
