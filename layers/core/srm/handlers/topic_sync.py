"""The topic-sync function (EventBridge schedule): remote topics, partitions, topic configs and ACLs, topic
mappings and the mirror's event source mappings (:func:`srm.replication.topic_sync.sync_topics`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from srm.app import App
from srm.replication.topic_sync import TopicSyncError, sync_topics

logger = Logger(service="srm-topic-sync")


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        result = sync_topics(App.current().topic_sync_context())
    except TopicSyncError as e:  # the other steps were done; the next run retries the failed ones
        logger.error("topic sync incomplete", extra={"errors": {k: str(v) for k, v in e.errors.items()}})
        raise
    logger.info("topics synced", extra={"replicated": len(result.plan.replicated)})
    return result.summary()
