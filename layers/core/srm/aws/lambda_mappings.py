"""The Lambda API adapter of :class:`srm.replication.mappings.EventSourceMappings`: MSK event source mappings of
the mirror function."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from srm.config.settings import FlowSettings
from srm.core.plans import MappingConfig, ObservedMapping, mapping_group_id
from srm.errors import ConfigError

__all__ = ["LAMBDA_MAX_PAYLOAD_BYTES", "LambdaEventSources", "LambdaMappingSwitch"]

log = logging.getLogger(__name__)

_BUSY_STATES = frozenset({"Creating", "Enabling", "Disabling", "Updating", "Deleting"})
_ENABLED_STATES = frozenset({"Creating", "Enabling", "Enabled", "Updating"})
_BUSY_ERRORS = frozenset({"ResourceInUseException", "ResourceConflictException", "TooManyRequestsException"})
# An MSK event is at most the 6 MB invoke payload; not configurable on AWS.
LAMBDA_MAX_PAYLOAD_BYTES = 6 * 1024 * 1024


class LambdaEventSources:
    """MSK event source mappings of the mirror function, through the Lambda API (a boto3 ``lambda`` client).

    A mapping is this flow's when it invokes the mirror function, reads the source cluster and consumes in the group
    :func:`mapping_group_id` names for its one topic; mappings are also tagged ``srm:source``, ``srm:target`` and
    ``srm:topic`` for people and cost reports. They start at ``TRIM_HORIZON`` (the whole retained log) when their
    group has no committed offsets, or at ``LATEST`` when the flow's source consumer has ``auto.offset.reset =
    latest`` (MirrorMaker 2's way to start a new topic from now). The batching window is whole seconds on AWS (below
    one second: MSK's 500 ms default, which Lambda cannot set explicitly).

    With ``event.source.on.failure = dead-letter`` a mapping gets ``failure_destination`` (an S3 bucket, SQS queue
    or SNS topic ARN) as its on-failure destination and ``event.source.max.retries`` as ``MaximumRetryAttempts``
    (left unset at -1: with a destination Lambda then stops after 10 retries); with ``retry`` it has neither, so a
    failing batch is retried until it succeeds and nothing is skipped.

    With ``event.source.provisioned.pollers.min``/``.max`` a mapping is in provisioned mode (that many event pollers
    of its own, billed while they exist); without them Lambda scales its pollers on demand."""

    def __init__(
        self,
        client: Any,
        function_arn: str,
        cluster_arn: str,
        source_auth: tuple[str, str] | None = None,
        failure_destination: str | None = None,
    ) -> None:
        self._lambda = client
        self.function_arn = function_arn
        self.cluster_arn = cluster_arn
        # (SASL_SCRAM_512_AUTH | CLIENT_CERTIFICATE_TLS_AUTH, secret ARN); None: IAM or none
        self.source_auth = source_auth
        self.failure_destination = failure_destination

    def desired_config(self, settings: FlowSettings) -> MappingConfig:
        ms = settings.event_source_batching_window_ms
        seconds = 0 if ms < 1000 else round(ms / 1000)
        config = MappingConfig(
            settings.event_source_batch_size,
            seconds * 1000,
            LAMBDA_MAX_PAYLOAD_BYTES,
            provisioned_pollers=settings.provisioned_pollers,
        )
        if settings.event_source_on_failure != "dead-letter":
            return config
        if not self.failure_destination:
            raise ConfigError(
                "event.source.on.failure = dead-letter needs an on-failure destination: deploy the flow's stack "
                "with MappingFailureDestinationArn or its dead-letter bucket (SRM_MAPPING_FAILURE_DESTINATION)"
            )
        return replace(config, on_failure=self.failure_destination, max_retries=settings.event_source_max_retries)

    def observe(self, source: str, target: str) -> list[ObservedMapping]:
        found = []
        pages = self._lambda.get_paginator("list_event_source_mappings").paginate(
            FunctionName=self.function_arn, EventSourceArn=self.cluster_arn
        )
        for page in pages:
            for m in page.get("EventSourceMappings", []):
                topics = m.get("Topics") or []
                group = (m.get("AmazonManagedKafkaEventSourceConfig") or {}).get("ConsumerGroupId")
                if len(topics) != 1 or group != mapping_group_id(source, target, topics[0]):
                    continue  # not one of this flow's mappings
                found.append(self._observed(m, topics[0]))
        return found

    def _access(self) -> dict[str, Any]:
        """How the mapping authenticates to the source (MSK reads the credentials from Secrets Manager)."""
        if self.source_auth is None:
            return {}
        kind, secret = self.source_auth
        return {"SourceAccessConfigurations": [{"Type": kind, "URI": secret}]}

    def _observed(self, m: Mapping[str, Any], topic: str) -> ObservedMapping:
        state = m.get("State", "")
        retries = m.get("MaximumRetryAttempts")
        config = MappingConfig(
            int(m.get("BatchSize") or 100),
            int(m.get("MaximumBatchingWindowInSeconds") or 0) * 1000,
            LAMBDA_MAX_PAYLOAD_BYTES,
            ((m.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination") or None,
            -1 if retries is None else int(retries),
            _pollers(m.get("ProvisionedPollerConfig")),
        )
        return ObservedMapping(
            m["UUID"],
            topic,
            config,
            state in _ENABLED_STATES,
            state in _BUSY_STATES,
            state=state,
            state_reason=str(m.get("StateTransitionReason") or ""),
            last_result=str(m.get("LastProcessingResult") or ""),
        )

    def create(self, source: str, target: str, topic: str, config: MappingConfig) -> ObservedMapping | None:
        window = (
            {"MaximumBatchingWindowInSeconds": config.batching_window_ms // 1000} if config.batching_window_ms else {}
        )
        try:
            m = self._lambda.create_event_source_mapping(
                FunctionName=self.function_arn,
                EventSourceArn=self.cluster_arn,
                Topics=[topic],
                StartingPosition="LATEST" if config.start_from == "latest" else "TRIM_HORIZON",
                Enabled=True,
                BatchSize=config.batch_size,
                AmazonManagedKafkaEventSourceConfig={"ConsumerGroupId": mapping_group_id(source, target, topic)},
                Tags={"srm:source": source, "srm:target": target, "srm:topic": topic},
                **window,
                **self._access(),
                **_failure_handling(config),
                **_poller_config(config),
            )
        except ClientError as e:
            if _code(e) in _BUSY_ERRORS:  # another run created it meanwhile: the next run adopts it
                log.info("mapping of %s not created now (%s); retried next run", topic, _code(e))
                return None
            raise
        return self._observed(m, topic)

    def update(
        self, source: str, target: str, mapping: ObservedMapping, config: MappingConfig
    ) -> ObservedMapping | None:
        # As create: a sub-second window is left at MSK's 500 ms default, unless the mapping has a window of whole
        # seconds to undo (0 is then the nearest Lambda can set)
        window = config.batching_window_ms // 1000
        keep_default = window == 0 and mapping.config.batching_window_ms == 0
        return self._update(
            mapping,
            Enabled=True,
            BatchSize=config.batch_size,
            **({} if keep_default else {"MaximumBatchingWindowInSeconds": window}),
            **_failure_handling(config, mapping.config),
            **_poller_config(config, mapping.config),
        )

    def disable(self, source: str, target: str, mapping: ObservedMapping) -> ObservedMapping | None:
        return self._update(mapping, Enabled=False)

    def _update(self, mapping: ObservedMapping, **changes: Any) -> ObservedMapping | None:
        try:
            m = self._lambda.update_event_source_mapping(UUID=mapping.id, **changes)
        except ClientError as e:
            if _code(e) in _BUSY_ERRORS:
                log.info("mapping %s of %s is busy (%s); retried next run", mapping.id, mapping.topic, _code(e))
                return None
            raise
        return self._observed(m, mapping.topic)

    def delete(self, source: str, target: str, mapping: ObservedMapping) -> bool:
        try:
            self._lambda.delete_event_source_mapping(UUID=mapping.id)
        except ClientError as e:
            if _code(e) == "ResourceNotFoundException":
                return True
            if _code(e) in _BUSY_ERRORS:
                log.info("mapping %s of %s is busy (%s); retried next run", mapping.id, mapping.topic, _code(e))
                return False
            raise
        return True


class LambdaMappingSwitch:
    """Event source mappings switched off and on by their UUIDs (``srm-control replication-offsets --force-stop``:
    a position moves only while nothing consumes its group). A mapping still settling from an earlier change is
    asked again, for up to ``wait_s``."""

    def __init__(self, client: Any, wait_s: float = 60.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self._lambda = client
        self._wait_s = wait_s
        self._sleep = sleep

    def set_enabled(self, ids: Sequence[str], enabled: bool) -> None:
        deadline = time.monotonic() + self._wait_s
        for uuid in ids:
            while True:
                try:
                    self._lambda.update_event_source_mapping(UUID=uuid, Enabled=enabled)
                    break
                except ClientError as e:
                    if _code(e) not in _BUSY_ERRORS or time.monotonic() >= deadline:
                        raise
                    self._sleep(2.0)
            log.info("event source mapping %s %s", uuid, "enabled" if enabled else "disabled")


def _failure_handling(config: MappingConfig, current: MappingConfig | None = None) -> dict[str, Any]:
    """The on-failure destination and retry bound to send: what is wanted, and what undoes a current one (an empty
    destination removes it, -1 retries without bound); nothing when neither is or was set."""
    out: dict[str, Any] = {}
    if config.on_failure or (current is not None and current.on_failure):
        out["DestinationConfig"] = {"OnFailure": {"Destination": config.on_failure or ""}}
    if config.max_retries != -1 or (current is not None and current.max_retries != -1):
        out["MaximumRetryAttempts"] = config.max_retries
    return out


def _poller_config(config: MappingConfig, current: MappingConfig | None = None) -> dict[str, Any]:
    """The provisioned pollers to send: the wanted bounds, or an empty config that returns a mapping in provisioned
    mode to on-demand polling (as an empty ``FilterCriteria`` removes filters); nothing when neither is or was set."""
    if config.provisioned_pollers is not None:
        low, high = config.provisioned_pollers
        return {"ProvisionedPollerConfig": {"MinimumPollers": low, "MaximumPollers": high}}
    if current is not None and current.provisioned_pollers is not None:
        return {"ProvisionedPollerConfig": {}}
    return {}


def _pollers(poller_config: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """A listed mapping's provisioned pollers; None when it polls on demand (no config, or an empty one)."""
    low, high = (poller_config or {}).get("MinimumPollers"), (poller_config or {}).get("MaximumPollers")
    return None if low is None or high is None else (int(low), int(high))


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))
