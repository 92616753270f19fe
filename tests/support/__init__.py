"""Test support: real Kafka clusters, record helpers, the srm runtime as a subprocess, sample events."""
