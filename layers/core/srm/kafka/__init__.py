"""The Kafka adapter: client configs and the per-container cache, admin requests, readers, topic ACLs. With
:mod:`srm.mm2.client` and the local runtime, the only modules that import confluent_kafka."""
