"""The SparkSession helper: the JDBC driver is on the class path and the broker's
mirror is readable, in the one session the Spark tests share."""

from __future__ import annotations

from pathlib import Path

from exactly.app import Broker


def test_session_reads_the_mirror_over_jdbc_while_the_broker_runs(spark, tmp_path: Path) -> None:
    with Broker(tmp_path / "data", **{"exactly.mirror.interval.ms": 50}) as broker:
        broker.create_topic("t", partitions=2)
        url = f"jdbc:sqlite:file:{tmp_path / 'data' / 'exactly.db'}?mode=ro"
        tables = spark.read.jdbc(url, "(SELECT name FROM sqlite_master WHERE type = 'table')",
                                 properties={"driver": "org.sqlite.JDBC"})
        names = {row.name for row in tables.collect()}
    assert {"alembic_version", "transactions", "partitions"} <= names
