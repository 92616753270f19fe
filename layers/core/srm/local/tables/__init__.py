"""A DynamoDB-compatible store kept in a compacted Kafka topic: the shared state of the nodes of an ``srm run``
cluster (:mod:`.replicated`), the tables themselves (:mod:`.engine`, :mod:`.table`, :mod:`.expressions`: pure) and
DynamoDB's HTTP API over them (:mod:`.server`)."""
