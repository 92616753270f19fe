"""Continuous verification in ``srm run`` (``verify.interval.seconds``; off by default): the scheduler's function that
compares each partition's newly replicated records with the source (:func:`srm.control.verify.verify_increment`),
resumed where the last run stopped, and publishes ``VerifiedThroughOffset``, ``VerifiedRecords`` and
``VerificationDifferences`` (EMF). The flow's status keeps how far each partition is verified and the last run's
differences (``srm-control status``)."""

from __future__ import annotations

import logging
from typing import Any

from srm.app import App
from srm.control.verify import differences, verify_increment, verify_values
from srm.flow import Flow
from srm.metrics.emf import publish

__all__ = ["verify_flow"]

log = logging.getLogger(__name__)


def verify_flow(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One scheduled run for this worker's flow (a scheduled function's signature: event and context unused)."""
    app = App.current()
    source, target = app.env.flow()
    config = app.config()
    settings = config.settings(source, target)
    if not settings.enabled or not settings.verify_interval_seconds:
        return {"verified": False}
    result = verify_increment(config, Flow(source, target), app.state, app.kafka.resolver)
    publish(f"{source}->{target}", verify_values(result))
    found = differences(result)
    (log.warning if found else log.info)("%s", result.verdict())
    return {"verified": True, "compared": result.compared, "differences": found, "identical": result.identical}
