"""librdkafka's log lines through srm's logging: its ERR a WARNING, a repeated complaint once a minute."""

from __future__ import annotations

import logging
import time

from srm.kafka.clients import CLIENT_LOG, _ClientLogFilter

REFUSED = "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"


def _record(text: str) -> logging.LogRecord:
    # as confluent-kafka logs a line: librdkafka's level 3 (ERR) as ERROR, (facility, client name, message)
    args = ("FAIL", "rdkafka#consumer-1", text)
    return CLIENT_LOG.makeRecord(CLIENT_LOG.name, logging.ERROR, "", 0, "%s [%s] %s", args, None)


def test_client_log_filter_repeated_refusals_pass_once_a_minute_as_warnings():
    # GIVEN librdkafka's refused connection, logged over and over by one broker thread, and once by another
    logs = _ClientLogFilter(seconds=60.0)
    first = _record(REFUSED)

    # WHEN the filter sees them
    passed = [logs.filter(first), *(logs.filter(_record(REFUSED)) for _ in range(40))]
    passed.append(logs.filter(_record(REFUSED.replace("127.0.0.1:1", "127.0.0.1:2"))))

    # THEN the first of each thread passes, as a WARNING; the repeats do not
    assert passed == [True, *[False] * 40, True]
    assert first.levelno == logging.WARNING and first.levelname == "WARNING"


def test_client_log_filter_says_how_many_it_left_out():
    # GIVEN a line, then 3 repeats within the interval
    logs = _ClientLogFilter(seconds=0.2)
    assert [logs.filter(_record(REFUSED)) for _ in range(4)] == [True, False, False, False]

    # WHEN the next one comes after the interval
    time.sleep(0.25)
    record = _record(REFUSED)

    # THEN it passes, saying how many were left out
    assert logs.filter(record)
    assert "(3 more like it in the last" in record.getMessage()
