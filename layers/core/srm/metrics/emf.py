"""CloudWatch metrics in the Embedded Metric Format, through Powertools: one EMF document per dimension set.

A function's values go out with dimension ``Flow`` or ``Flow`` + ``Topic`` (:mod:`srm.metrics.model.names`), never more;
each call builds its own :class:`EphemeralMetrics`, so invocations running side by side in one process (the local
runtime) share no metric state. ``POWERTOOLS_METRICS_DISABLED`` turns printing off (the local runtime's default).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from aws_lambda_powertools.metrics import EphemeralMetrics

from srm.metrics.model.names import EMF_METRICS, NAMESPACE

__all__ = ["publish"]

log = logging.getLogger(__name__)

Value = tuple[str, float, str | None]  # metric name, value, topic (None: the flow's)


def publish(flow: str, values: Iterable[Value]) -> None:
    """Print the values as EMF documents; an unknown name is a bug (KeyError), anything else is logged."""
    by_topic: dict[str | None, list[tuple[str, float]]] = defaultdict(list)
    for name, value, topic in values:
        if name not in EMF_METRICS:
            raise KeyError(f"{name} is not listed in srm.metrics.model.names.EMF_METRICS")
        by_topic[topic].append((name, value))
    for topic, metrics in by_topic.items():
        try:
            emf = EphemeralMetrics(namespace=NAMESPACE)
            emf.service = None  # type: ignore[assignment]  # POWERTOOLS_SERVICE_NAME would add a dimension
            emf.add_dimension(name="Flow", value=flow)
            if topic is not None:
                emf.add_dimension(name="Topic", value=topic)
            for name, value in metrics:
                emf.add_metric(name=name, unit=EMF_METRICS[name], value=value)
            emf.flush_metrics()
        except Exception as e:  # a metric never fails the work it describes
            log.warning("CloudWatch metrics not printed: %s", e)
