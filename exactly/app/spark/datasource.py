"""The ``exactly`` PySpark data source: Spark's Kafka connector's options and
columns, read_committed reads planned up to the LSO (``exactly/app/spark/source.py``) and an
exactly-once sink (``exactly/app/spark/sink.py``).

Spark pickles this class by module reference to its Python workers, which is why it
lives in an importable module and keeps no state but its options.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

#: the columns of Spark's Kafka source (with ``includeHeaders``), in its order
KAFKA_SOURCE_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
#: without ``includeHeaders`` Spark's Kafka source has no headers column
KAFKA_SOURCE_SCHEMA_NO_HEADERS = KAFKA_SOURCE_SCHEMA[:KAFKA_SOURCE_SCHEMA.index(", headers")]


class ExactlyDataSource(DataSource):
    """``spark.read.format("exactly")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "exactly"

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return KAFKA_SOURCE_SCHEMA if headers else KAFKA_SOURCE_SCHEMA_NO_HEADERS

    def reader(self, schema):
        from exactly.app.spark.source import TopicReader
        return TopicReader(self.options, schema)

    def streamReader(self, schema):
        from exactly.app.spark.source import TopicStreamReader
        return TopicStreamReader(self.options, schema)

    def writer(self, schema, overwrite: bool):
        from exactly.app.spark.sink import TopicWriter
        return TopicWriter(self.options, schema)

    def streamWriter(self, schema, overwrite: bool):
        from exactly.app.spark.sink import TopicStreamWriter
        return TopicStreamWriter(self.options, schema)
