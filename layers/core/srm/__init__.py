"""serverless-srm: a Streams Replication Manager for Apache Kafka, serverless on AWS."""

__version__ = "0.1.0"
