"""The PySpark face: the ``exactly`` data source (read topics read_committed, write
them exactly once) and the JDBC helpers over the SQLite mirror.

It reaches the broker only through the Kafka protocol (``kafka.bootstrap.servers``)
and the mirror file, so Spark executors elsewhere, or a real Kafka cluster, work the
same. Nothing here is imported by the broker: pyspark is the optional ``spark`` extra.
"""
