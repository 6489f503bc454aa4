"""Typed DataFrames over the SQLite mirror (``<data-dir>/exactly.db``), read over JDBC.

Each mirror table is declared once, by its SQLAlchemy model
(``exactly/coordinator/mirror_models.py``); the Spark schema is derived from the model's
column types, so the two cannot drift. What the JDBC path needs (docs/formats.md
§15 and the pitfalls of Debian's sqlite-jdbc):

* ``customSchema`` for every column: sqlite-jdbc reports ``BIGINT`` as
  ``decimal(20,0)`` and ``INTEGER`` as a 32-bit int, so 64-bit ids, offsets and
  epoch-millisecond times are read as Spark ``BIGINT`` only when told;
* epoch-millisecond columns (``*_ms``) stay as they are and each gains a Spark
  timestamp beside it, named without the suffix (``start_ms`` -> ``start``); a
  negative value (Kafka's -1, "none") is a NULL timestamp;
* JSON lists of "topic-partition" become ``ARRAY<STRING>``;
* a read-only connection (``?mode=ro``): a wrong path must fail, not create an
  empty database; the path is checked before Spark is asked, for a clear error;
* one JDBC partition per table: one SQLite read transaction, so each read of a
  table is one consistent snapshot while the broker writes (WAL: readers never
  block the mirror's writer). A DataFrame is read again by every action: take
  ``localCheckpoint()`` of it when several results must agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import BigInteger, Integer, Table, Text

from exactly.coordinator.mirror_db import BUSY_TIMEOUT_MS, db_path
from exactly.coordinator.mirror_models import (
    FinishedTransaction,
    Group,
    GroupOffset,
    Partition,
    PartitionProducer,
    ProducerId,
    TransactionalId,
)

JDBC_DRIVER = "org.sqlite.JDBC"
#: Spark's type of each SQLAlchemy column type the mirror uses
SPARK_TYPES = {BigInteger: "BIGINT", Integer: "INT", Text: "STRING"}
MS_SUFFIX = "_ms"


@dataclass(frozen=True)
class MirrorTable:
    """A mirror table as Spark sees it: the model's columns, which of them are
    epoch-millisecond times and which are JSON lists of partitions."""

    table: Table
    times: tuple[str, ...] = ()
    partition_lists: tuple[str, ...] = ()

    @property
    def custom_schema(self) -> str:
        """Spark's ``customSchema`` option: every column, typed from the model."""
        return ", ".join(f"`{column.name}` {_spark_type(column)}" for column in self.table.columns)


def _spark_type(column) -> str:
    try:
        return SPARK_TYPES[type(column.type)]
    except KeyError:
        raise TypeError(f"{column.table.name}.{column.name}: no Spark type for {column.type!r}") from None


#: the tables, by the name this module reads them under
TABLES: dict[str, MirrorTable] = {
    "current_transactions": MirrorTable(TransactionalId.__table__, times=("txn_start_ms", "last_update_ms"),
                                        partition_lists=("partitions",)),
    "finished_transactions": MirrorTable(FinishedTransaction.__table__, times=("start_ms", "end_ms"),
                                         partition_lists=("partitions",)),
    "producers": MirrorTable(ProducerId.__table__, times=("first_seen_ms", "last_seen_ms")),
    "partition_producers": MirrorTable(PartitionProducer.__table__, times=("last_timestamp_ms", "updated_ms")),
    "partitions": MirrorTable(Partition.__table__, times=("updated_ms",)),
    "group_offsets": MirrorTable(GroupOffset.__table__, times=("commit_timestamp_ms",)),
    "groups": MirrorTable(Group.__table__, times=("state_timestamp_ms",)),
}


def mirror_path(data: Path | str) -> Path:
    """The mirror database of ``data``: a data directory or the database file itself.

    :raise FileNotFoundError: there is no such database (never create one)."""
    path = Path(data).resolve()
    if path.is_dir():
        path = db_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no SQLite mirror at {path}: give the broker's data directory "
                                "(a broker creates <data-dir>/exactly.db when it opens it)")
    return path


def jdbc_url(data: Path | str) -> str:
    """The read-only JDBC URL of the mirror of ``data`` (a data directory or the file)."""
    return f"jdbc:sqlite:file:{quote(str(mirror_path(data)))}?mode=ro"


def read_table(spark, data: Path | str, name: str):
    """The mirror table ``name`` (a key of :data:`TABLES`) as a typed DataFrame."""
    from pyspark.sql import functions as F

    if name not in TABLES:
        raise ValueError(f"no mirror table {name!r}: one of {', '.join(TABLES)}")
    spec = TABLES[name]
    raw = (spark.read.format("jdbc")
           .option("url", jdbc_url(data))
           .option("driver", JDBC_DRIVER)
           .option("dbtable", f'"{spec.table.name}"')
           .option("customSchema", spec.custom_schema)
           .option("busy_timeout", str(BUSY_TIMEOUT_MS))
           .load())
    columns = []
    for column in raw.columns:
        if column in spec.partition_lists:
            columns.append(F.from_json(column, "ARRAY<STRING>").alias(column))
            continue
        columns.append(F.col(column))
        if column in spec.times:
            columns.append(F.when(F.col(column) >= 0, F.timestamp_millis(column))
                           .alias(column.removesuffix(MS_SUFFIX)))
    return raw.select(*columns)


def current_transactions(spark, data: Path | str):
    """``transactional_ids``: the latest state of each transactional id."""
    return read_table(spark, data, "current_transactions")


def finished_transactions(spark, data: Path | str):
    """``transactions``: one row per finished (committed or aborted) transaction."""
    return read_table(spark, data, "finished_transactions")


def producers(spark, data: Path | str):
    """``producer_ids``: the producer ids assigned to transactional ids."""
    return read_table(spark, data, "producers")


def partitions(spark, data: Path | str):
    """``partitions``: offsets (HW, LSO, log start and end) of every partition."""
    return read_table(spark, data, "partitions")


def group_offsets(spark, data: Path | str):
    """``group_offsets``: committed offsets, and pending ones inside transactions."""
    return read_table(spark, data, "group_offsets")
