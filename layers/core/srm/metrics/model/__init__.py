"""The metrics model, pure: raw records (schema), distribution sketches, series, and every metric's name. No I/O, no
Spark, AWS or Kafka client: the Spark job, the sinks and the CloudWatch pieces beside it are its adapters."""
