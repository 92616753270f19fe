"""The topic-sync function (EventBridge schedule): remote topics, partitions, topic configs and ACLs, topic
mappings and the mirror's event source mappings (:func:`srm.replication.topic_sync.sync_topics`); each run also
refreshes the deployment's metrics API advert on the flow's target (:func:`srm.control.remote.advertise`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from srm.app.topic_sync import TopicSyncWiring
from srm.control.remote import advertise
from srm.metrics.emf import Value, publish
from srm.replication.topic_sync import TopicSyncError, TopicSyncResult, sync_topics

logger = Logger(service="srm-topic-sync")


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    app = TopicSyncWiring.current()
    ctx = app.topic_sync_context()
    flow = f"{ctx.source}->{ctx.target}"
    try:
        result = sync_topics(ctx)
    except TopicSyncError as e:  # the other steps were done; the next run retries the failed ones
        logger.error("topic sync incomplete", extra={"errors": {k: str(v) for k, v in e.errors.items()}})
        publish(flow, [*topic_sync_values(e.result), ("TopicSyncFailures", len(e.errors), None)])
        raise
    finally:
        app.end_of_call(1.0)
        _advertise(app)
    publish(flow, [*topic_sync_values(result), ("TopicSyncFailures", 0, None)])
    logger.info("topics synced", extra={"replicated": len(result.plan.replicated)})
    return result.summary()


def _advertise(app: TopicSyncWiring) -> None:
    try:
        context = app.advert_context()
        if context is not None:
            advertise(context)
    except Exception as e:  # peers find this deployment a run later; the sync itself went as it went
        logger.warning("metrics API not advertised, next run retries: %s", e)


def topic_sync_values(result: TopicSyncResult) -> list[Value]:
    acls = (result.acls.created + result.acls.deleted) if result.acls is not None else 0
    return [
        ("TopicsCreated", len(result.created), None),
        ("TopicConfigsChanged", len(result.configs_changed), None),
        ("TopicAclsChanged", acls, None),
        ("MappingProblems", len(result.mappings.problems) if result.mappings is not None else 0, None),
    ]
