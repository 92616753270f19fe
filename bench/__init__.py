"""``make bench``: replication throughput and latency, measured side by side against the raw copy limit.

Two local Apache Kafka clusters (KRaft, one node each), the same brokers and data for every path:

- **limit** — a plain confluent-kafka consume→produce copy loop (:mod:`bench.limit`): what any replicator pays;
- **handler** — the mirror Lambda handler alone on pre-built MSK events (:mod:`bench.handler`): what an invocation
  costs, which sets the Lambda bill;
- **end to end** — ``srm run`` replicating a backlog and a steady live stream (:mod:`bench.endtoend`).

The table is printed and written as JSON (``bench/results.json``) so a change can be compared with the last run.
Not part of ``make test``: timings are reported here, never asserted.
"""
