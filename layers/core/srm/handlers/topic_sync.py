"""The topic-sync function (EventBridge schedule): remote topics, partitions and event source mappings."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from srm.app import App
from srm.topics import sync_topics

logger = Logger(service="srm-topic-sync")


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    result = sync_topics(App.current().topic_sync())
    logger.info("topics synced", extra={"replicated": len(result.plan.replicated)})
    return result.summary()
