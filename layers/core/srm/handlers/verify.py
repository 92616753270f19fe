"""The verify function (schedule): continuous verification (``verify.interval.seconds``; 0, the default, is off).

Each tick asks whether a run is due (:func:`srm.control.verify.verify_due`); a run compares each partition's records
replicated since the last identical run with the source, starts no partition in the second half of the invocation's
time (those left go first next time), and publishes ``VerifiedThroughOffset``, ``VerifiedRecords`` and
``VerificationDifferences`` (EMF) and a raw metric record per partition. ``srm run`` calls this handler on the same
event every ``verify.interval.seconds``; on AWS the schedule is ``VerifySchedule``.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger

from srm.app.verify import VerifyWiring
from srm.control.verify import differences, verify_due, verify_values
from srm.core.said import PROBLEM_AGAIN_S, Said
from srm.metrics.emf import publish

logger = Logger(service="srm-verify")
_said = Said()  # per container: the verdict is said when it changes, not at every run

FLUSH_S = 1.0  # the raw metric records' flush before returning (see srm.handlers.mirror)


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    app = VerifyWiring.current()
    ctx = app.verify_context()
    deadline = time.monotonic() + context.get_remaining_time_in_millis() / 2000  # half the time left
    try:
        result = verify_due(ctx, deadline=deadline)
    finally:
        app.end_of_call(FLUSH_S)
    if result is None:
        return {"verified": False}
    publish(str(ctx.flow), verify_values(result))
    found = differences(result)
    # an identical copy is said when it becomes one; differences when found, and again every few minutes while
    # they persist (each run re-verifies from the last identical position, so it finds them again)
    again = _said.tell(str(ctx.flow), bool(found), again_after_s=PROBLEM_AGAIN_S if found else None)
    if again is None:
        logger.debug(result.verdict())
    else:
        (logger.warning if found else logger.info)(result.verdict() + again)
    return {
        "verified": True,
        "compared": result.compared,
        "differences": found,
        "identical": result.identical,
        "partitions": len(result.reports),
        "deferred": len(result.deferred),
    }
