"""What a container is told through its environment; read once, by :meth:`Environment.from_env`.

Nothing else in ``srm`` reads ``os.environ``. A Lambda function of a flow is deployed with:

================================  =====================================================================
``SRM_SOURCE`` / ``SRM_TARGET``   the flow's cluster aliases (a stack per replication flow)
``SRM_CONFIG_TABLE``              config table name (default ``srm-config``)
``SRM_STATE_TABLE``               state table name (default ``srm-state``)
``SRM_METRICS_TABLE``             metrics table name (default ``srm-metrics``; the metrics API reads it)
``SRM_CONFIG_CACHE_SECONDS``      how stale the cached config may be (default 10)
``SRM_SECRETS_CACHE_SECONDS``     how long a Secrets Manager value is cached (default 300; rotation shows after it)
``SRM_MIRROR_FUNCTION``           topic sync only: the mirror function's ARN, target of the event source mappings
``SRM_SOURCE_CLUSTER_ARN``        topic sync only: the source MSK cluster the mappings read
``SRM_SOURCE_AUTH``               topic sync only: how mappings authenticate (``SASL_SCRAM_512_AUTH``…; IAM if unset)
``SRM_SOURCE_SECRET_ARN``         topic sync only: the secret of those credentials
``SRM_MAPPING_FAILURE_DESTINATION`` topic sync only: the mappings' on-failure destination (``event.source.on.failure``)
``SRM_METRICS_STREAM``            the Firehose delivery stream of raw metric records (monitoring template)
``SRM_METRICS_DIR``               local runtime: raw metric records go to ``<dir>/raw/dt=…/hour=…`` instead …
``SRM_METRICS_TOPIC``             … or, with the state in Kafka, to this topic on ``SRM_STORE_CLUSTER`` (all nodes')
``SRM_STATE_TOPIC``               local runtime: the state, the configuration and the nodes are in this topic …
``SRM_STORE_CLUSTER``             … of this cluster, reached with …
``SRM_STORE_PROPERTIES``          … these properties (JSON: the global and that cluster's; secrets as references)
``SRM_METRICS_STORE_TOPIC``       local runtime: the aggregated metrics' topic on that cluster (else the metrics table)
``SRM_NODE_ID``                   local runtime: this node's id among the nodes of its cluster
``SRM_LOCAL_STATE_DIR``           local runtime: the node's state directory (its own records, as files)
``AWS_LAMBDA_FUNCTION_NAME``      (set by Lambda) names the checkpoints' emitter where no node does
``SRM_API_URL``                   the metrics API's base URL, advertised by topic sync (remote querying)
``SRM_DEPLOYMENT_NAME``           the name it is advertised under unless ``metrics.api.deployment.name`` says
``SRM_DEAD_LETTER_BUCKET``        the S3 bucket of records the target refused (``errors.tolerance = all``) …
``SRM_DEAD_LETTER_DIR``           … or, locally, the directory they go to
``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``   where DynamoDB is (boto3 reads them)
================================  =====================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from srm.aws.secrets import DEFAULT_SECRETS_MAX_AGE
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = ["Environment"]


@dataclass(frozen=True)
class Environment:
    source: str | None
    target: str | None
    config_table: str = "srm-config"
    state_table: str = "srm-state"
    metrics_table: str = "srm-metrics"
    config_cache_seconds: float = 10.0
    secrets_cache_seconds: float = DEFAULT_SECRETS_MAX_AGE
    region: str = "us-east-1"
    mirror_function: str | None = None  # with source_cluster_arn: event source mappings through the Lambda API
    source_cluster_arn: str | None = None
    source_auth: tuple[str, str] | None = None  # how the mappings authenticate (SRM_SOURCE_AUTH, _SECRET_ARN)
    mapping_failure_destination: str | None = None  # where mappings send batches they give up on (dead-letter)
    metrics_stream: str | None = None  # raw metrics to this Firehose stream …
    metrics_dir: str | None = None  # … or, locally, into files under this folder …
    metrics_topic: str | None = None  # … or into this topic of the store cluster; none of them: none are emitted
    store_cluster: str | None = None  # the cluster holding an srm run cluster's state (and metrics topic)
    state_topic: str | None = None  # the state is kept in this topic of the store cluster (else the state table)
    store_properties: str | None = None  # JSON: the properties the store cluster's clients are built from
    metrics_store_topic: str | None = None  # aggregated metrics in this topic of the store cluster (else the table)
    node_id: str | None = None  # the local runtime's node (else the Lambda function is the emitter of checkpoints)
    local_state_dir: str | None = None  # the local runtime's state directory
    function_name: str | None = None
    api_url: str | None = None  # this deployment's metrics API, advertised to peers (remote querying)
    deployment: str | None = None  # its default name (else the region)
    dead_letter_bucket: str | None = None  # records the target refuses go to this bucket …
    dead_letter_dir: str | None = None  # … or, locally, this folder; neither: such a record fails its batch

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        try:
            cache = float(env.get("SRM_CONFIG_CACHE_SECONDS", "10"))
        except ValueError:
            raise ConfigError("SRM_CONFIG_CACHE_SECONDS must be a number of seconds") from None
        try:
            secrets_cache = float(env.get("SRM_SECRETS_CACHE_SECONDS", str(DEFAULT_SECRETS_MAX_AGE)))
        except ValueError:
            raise ConfigError("SRM_SECRETS_CACHE_SECONDS must be a number of seconds") from None
        return cls(
            source=env.get("SRM_SOURCE") or None,
            target=env.get("SRM_TARGET") or None,
            config_table=env.get("SRM_CONFIG_TABLE", "srm-config"),
            state_table=env.get("SRM_STATE_TABLE", "srm-state"),
            metrics_table=env.get("SRM_METRICS_TABLE", "srm-metrics"),
            config_cache_seconds=cache,
            secrets_cache_seconds=secrets_cache,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            mirror_function=env.get("SRM_MIRROR_FUNCTION") or None,
            source_cluster_arn=env.get("SRM_SOURCE_CLUSTER_ARN") or None,
            source_auth=_source_auth(env.get("SRM_SOURCE_AUTH", ""), env.get("SRM_SOURCE_SECRET_ARN", "")),
            mapping_failure_destination=env.get("SRM_MAPPING_FAILURE_DESTINATION") or None,
            metrics_stream=env.get("SRM_METRICS_STREAM") or None,
            metrics_dir=env.get("SRM_METRICS_DIR") or None,
            metrics_topic=env.get("SRM_METRICS_TOPIC") or None,
            store_cluster=env.get("SRM_STORE_CLUSTER") or None,
            state_topic=env.get("SRM_STATE_TOPIC") or None,
            store_properties=env.get("SRM_STORE_PROPERTIES") or None,
            metrics_store_topic=env.get("SRM_METRICS_STORE_TOPIC") or None,
            node_id=env.get("SRM_NODE_ID") or None,
            local_state_dir=env.get("SRM_LOCAL_STATE_DIR") or None,
            function_name=env.get("AWS_LAMBDA_FUNCTION_NAME") or None,
            api_url=(env.get("SRM_API_URL") or "").rstrip("/") or None,
            deployment=env.get("SRM_DEPLOYMENT_NAME") or None,
            dead_letter_bucket=env.get("SRM_DEAD_LETTER_BUCKET") or None,
            dead_letter_dir=env.get("SRM_DEAD_LETTER_DIR") or None,
        )

    def flow(self) -> Flow:
        if not self.source or not self.target:
            raise ConfigError("SRM_SOURCE and SRM_TARGET must name the flow's clusters (a stack per flow)")
        return Flow(self.source, self.target)


# what Lambda accepts for an MSK event source (SASL_SCRAM_256_AUTH is for self-managed Kafka only)
_MAPPING_AUTH = ("SASL_SCRAM_512_AUTH", "CLIENT_CERTIFICATE_TLS_AUTH")


def _source_auth(kind: str, secret_arn: str) -> tuple[str, str] | None:
    """How the event source mappings authenticate to the source: IAM (or nothing) unless a secret is named."""
    if kind in ("", "IAM", "NONE"):
        return None
    if kind not in _MAPPING_AUTH or not secret_arn:
        raise ConfigError(f"SRM_SOURCE_AUTH={kind!r} needs one of {', '.join(_MAPPING_AUTH)} and SRM_SOURCE_SECRET_ARN")
    return kind, secret_arn
