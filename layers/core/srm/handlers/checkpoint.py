"""The checkpoint function (EventBridge schedule): translate group offsets, emit checkpoints, sync idle groups."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from srm.app import App
from srm.replication.checkpoint import emit_checkpoints

logger = Logger(service="srm-checkpoint")


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    result = emit_checkpoints(App.current().checkpoint_context())
    logger.info("checkpoints emitted", extra=result.summary())
    return result.summary()
