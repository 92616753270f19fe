"""Replication metrics: the raw record (:mod:`.schema`), the sketch (:mod:`.sketch`), the sinks that carry raw
records off the record path (:mod:`.sinks`), the metrics table (:mod:`.table`) and the Spark aggregation from raw
records to the table (:mod:`.aggregate`, :mod:`.runner`; they import pyspark, so nothing here imports them).
"""
