"""Replication metrics. :mod:`.model` is pure: the raw record (schema), the sketch, series and names. Beside it, its
adapters: the sinks that carry raw records off the record path (:mod:`.sinks`), EMF and the CloudWatch dashboard
(:mod:`.emf`, :mod:`.dashboard`), and the Spark aggregation from raw records to the metrics table
(:mod:`.aggregate`, :mod:`.runner`; they import pyspark, so nothing here imports them).
"""
