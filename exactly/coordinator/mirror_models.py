"""The SQLite mirror's tables: SQLAlchemy 2 declarative models, one public surface.

The mirror (``exactly/coordinator/mirror.py``) derives every row from the logs of
``__transaction_state``, ``__consumer_offsets`` and ``__cluster_metadata`` or from
periodic snapshots of the partitions; nothing here is a source of truth, and a deleted database is rebuilt.
Spark reads these tables over JDBC, so (docs/formats.md §15):

* every id, offset, epoch, sequence and time is ``BIGINT`` (an ``INTEGER`` column
  is read as a 32-bit int and silently wraps); partitions are Kafka's int32;
* times are epoch milliseconds in ``*_ms`` columns (no DATETIME: Spark drops the time);
* lists are JSON text.

Columns holding an enum carry a CHECK constraint generated from the Python enum,
so the database refuses a value the code does not know. Alembic owns the schema
(``exactly/migrations/``); a test checks that the migrations and these models agree.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Iterable

from sqlalchemy import BigInteger, CheckConstraint, Integer, MetaData, Table, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from exactly.coordinator.transaction_state import AbortCause, TransactionState
from exactly.storage.record_batch import NO_PRODUCER_ID, ControlType


class OffsetStatus(enum.Enum):
    """Whether a group offset is visible to OffsetFetch or waits for its transaction."""

    COMMITTED = "committed"
    PENDING = "pending"


#: the ``state`` column's values: the names Kafka's tools print
TXN_STATES = tuple(state.display for state in TransactionState)
#: the ``outcome`` column's values: the marker that ended the transaction
OUTCOMES = tuple(control.name for control in ControlType)
#: the ``abort_cause`` column's values: why a transaction was aborted
ABORT_CAUSES = tuple(cause.value for cause in AbortCause)
OFFSET_STATUSES = tuple(status.value for status in OffsetStatus)


def one_of(column: str, values: Iterable[str]) -> str:
    """The CHECK expression ``column IN ('a', 'b', ...)``."""
    quoted = ", ".join("'" + value.replace("'", "''") + "'" for value in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    #: every model here is mapped to a table of its own (SQLAlchemy types it as any
    #: FromClause, which a mapping to a join or a subquery would be)
    __table__: ClassVar[Table]
    metadata = MetaData(naming_convention={
        "pk": "pk_%(table_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    })


class TransactionalId(Base):
    """The latest record of each transactional id in ``__transaction_state``."""

    __tablename__ = "transactional_ids"
    __table_args__ = (CheckConstraint(one_of("state", TXN_STATES), name="state"),)

    transactional_id: Mapped[str] = mapped_column(Text, primary_key=True)
    producer_id: Mapped[int] = mapped_column(BigInteger)
    producer_epoch: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(Text)
    timeout_ms: Mapped[int] = mapped_column(BigInteger)
    #: JSON list of "topic-partition", sorted; empty once the transaction completes
    partitions: Mapped[str] = mapped_column(Text)
    #: -1 when no transaction has started
    txn_start_ms: Mapped[int] = mapped_column(BigInteger)
    last_update_ms: Mapped[int] = mapped_column(BigInteger)
    #: the transaction version of the client's last request (2: KIP-890 part 2, 0: earlier)
    transaction_version: Mapped[int] = mapped_column(BigInteger, server_default="0")
    #: where the record is: partition and offset in ``__transaction_state``
    source_partition: Mapped[int] = mapped_column(Integer)
    source_offset: Mapped[int] = mapped_column(BigInteger)


class FinishedTransaction(Base):
    """One row per CompleteCommit/CompleteAbort record: a finished transaction."""

    __tablename__ = "transactions"
    __table_args__ = (
        CheckConstraint(one_of("outcome", OUTCOMES), name="outcome"),
        UniqueConstraint("log_partition", "log_offset"),
        CheckConstraint(one_of("abort_cause", ABORT_CAUSES), name="abort_cause"),
    )

    #: assigned by the one writer (max + 1): SQLite autoincrements only an INTEGER
    #: primary key, which Spark would read as a 32-bit int
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    transactional_id: Mapped[str] = mapped_column(Text, index=True)
    producer_id: Mapped[int] = mapped_column(BigInteger)
    producer_epoch: Mapped[int] = mapped_column(BigInteger)
    outcome: Mapped[str] = mapped_column(Text)
    #: JSON list of "topic-partition" from the Prepare record (the Complete one has none)
    partitions: Mapped[str] = mapped_column(Text)
    start_ms: Mapped[int] = mapped_column(BigInteger)
    end_ms: Mapped[int] = mapped_column(BigInteger)
    #: the Complete record: partition and offset in ``__transaction_state``
    log_partition: Mapped[int] = mapped_column(Integer)
    log_offset: Mapped[int] = mapped_column(BigInteger)
    #: why an aborted transaction was aborted (an ``AbortCause`` value) and by whom, from
    #: the CompleteAbort record's headers; NULL for a commit, or an abort logged without them
    abort_cause: Mapped[str | None] = mapped_column(Text, nullable=True)
    abort_actor: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: the transaction version it ran with (2: KIP-890 part 2, an epoch bump at its end; 0: earlier)
    transaction_version: Mapped[int] = mapped_column(BigInteger, server_default="0")


class ProducerId(Base):
    """Producer ids the transaction log has assigned to transactional ids."""

    __tablename__ = "producer_ids"

    producer_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    transactional_id: Mapped[str] = mapped_column(Text, index=True)
    producer_epoch: Mapped[int] = mapped_column(BigInteger)
    #: the update times of the first and latest records naming this producer id
    first_seen_ms: Mapped[int] = mapped_column(BigInteger)
    last_seen_ms: Mapped[int] = mapped_column(BigInteger)


class PartitionProducer(Base):
    """Producer state of each partition (DescribeProducers), from a periodic snapshot."""

    __tablename__ = "partition_producers"

    topic: Mapped[str] = mapped_column(Text, primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    producer_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    producer_epoch: Mapped[int] = mapped_column(BigInteger)
    coordinator_epoch: Mapped[int] = mapped_column(BigInteger)
    last_sequence: Mapped[int] = mapped_column(BigInteger)
    last_offset: Mapped[int] = mapped_column(BigInteger)
    last_timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    #: first offset of the producer's open transaction; NULL when none is open
    txn_first_offset: Mapped[int | None] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class Partition(Base):
    """Offsets of every partition, from a periodic snapshot."""

    __tablename__ = "partitions"

    topic: Mapped[str] = mapped_column(Text, primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    #: the topic's id (KIP-516) in Kafka's base64 form, as the API and console show it: a
    #: topic deleted and created again under its name has a new one. NULL in rows from
    #: before revision 0006 until the next snapshot
    topic_id: Mapped[str | None] = mapped_column(Text)
    high_watermark: Mapped[int] = mapped_column(BigInteger)
    last_stable_offset: Mapped[int] = mapped_column(BigInteger)
    log_start_offset: Mapped[int] = mapped_column(BigInteger)
    log_end_offset: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class GroupOffset(Base):
    """Group offsets from ``__consumer_offsets``: the committed one (producer id -1)
    and, per producer, one pending inside a transaction not yet ended."""

    __tablename__ = "group_offsets"
    __table_args__ = (
        CheckConstraint(one_of("status", OFFSET_STATUSES), name="status"),
        CheckConstraint(f"(status = '{OffsetStatus.COMMITTED.value}') = (producer_id = {NO_PRODUCER_ID})",
                        name="status_producer"),
    )

    group_id: Mapped[str] = mapped_column(Text, primary_key=True)
    topic: Mapped[str] = mapped_column(Text, primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    producer_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False,
                                             index=True)
    status: Mapped[str] = mapped_column(Text)
    offset: Mapped[int] = mapped_column(BigInteger)
    metadata_: Mapped[str] = mapped_column("metadata", Text)
    commit_timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    #: the record's partition and offset in ``__consumer_offsets``; a pending offset
    #: replaces the committed one only if it was written later (Kafka's rule)
    log_partition: Mapped[int] = mapped_column(Integer)
    log_offset: Mapped[int] = mapped_column(BigInteger)


class Group(Base):
    """The latest GroupMetadata record of each consumer group."""

    __tablename__ = "groups"

    group_id: Mapped[str] = mapped_column(Text, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)
    protocol_type: Mapped[str] = mapped_column(Text)
    protocol: Mapped[str | None] = mapped_column(Text)
    leader: Mapped[str | None] = mapped_column(Text)
    state_timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    #: JSON list of members: id, instance id, client id and host, timeouts in ms
    members: Mapped[str] = mapped_column(Text)
    log_partition: Mapped[int] = mapped_column(Integer)
    log_offset: Mapped[int] = mapped_column(BigInteger)


class Acl(Base):
    """Every ACL of ``__cluster_metadata`` (its AccessControlEntryRecords), with Kafka's
    names for its codes (``TOPIC``, ``LITERAL``, ``READ``, ``ALLOW``)."""

    __tablename__ = "acls"

    #: the ACL's id (a UUID, as text), the key of its record
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    resource_type: Mapped[str] = mapped_column(Text)
    resource_name: Mapped[str] = mapped_column(Text)
    pattern_type: Mapped[str] = mapped_column(Text)
    principal: Mapped[str] = mapped_column(Text, index=True)
    host: Mapped[str] = mapped_column(Text)
    operation: Mapped[str] = mapped_column(Text)
    permission_type: Mapped[str] = mapped_column(Text)


class ScramCredential(Base):
    """Which users have a SCRAM credential, for which mechanism (``SCRAM-SHA-256``,
    ``SCRAM-SHA-512``), with how many iterations -- never the salt or the keys."""

    __tablename__ = "scram_credentials"

    user_name: Mapped[str] = mapped_column(Text, primary_key=True)
    mechanism: Mapped[str] = mapped_column(Text, primary_key=True)
    iterations: Mapped[int] = mapped_column(BigInteger)


class MirrorProgress(Base):
    """The next offset to mirror of each internal partition, committed in the same
    SQLite transaction as the rows it produced."""

    __tablename__ = "mirror_progress"

    topic: Mapped[str] = mapped_column(Text, primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    next_offset: Mapped[int] = mapped_column(BigInteger)


#: the ``outcome`` values of an audited transaction
AUDIT_OUTCOMES = (ControlType.COMMIT.name, ControlType.ABORT.name)


class AuditTransaction(Base):
    """The last exactly-once audit of each (group, input topic, output topic): one row
    per input partition of each committed or aborted transaction of the group, with its
    input range and what it wrote to the output topic (``exactly/app/engine/audit.py``).
    Written when an audit runs (the HTTP API's, the CLI's, the console's), all rows of
    the audited triple replaced at once; not derived from the logs, so a rebuild keeps it."""

    __tablename__ = "audit_transactions"
    __table_args__ = (CheckConstraint(one_of("outcome", AUDIT_OUTCOMES), name="outcome"),
                      CheckConstraint(one_of("abort_cause", ABORT_CAUSES), name="abort_cause"))

    group_id: Mapped[str] = mapped_column(Text, primary_key=True)
    input_topic: Mapped[str] = mapped_column(Text, primary_key=True)
    output_topic: Mapped[str] = mapped_column(Text, primary_key=True)
    input_partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    #: the transaction's marker on the group's ``__consumer_offsets`` partition
    offsets_marker_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    transactional_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    producer_id: Mapped[int] = mapped_column(BigInteger)
    producer_epoch: Mapped[int] = mapped_column(BigInteger)
    outcome: Mapped[str] = mapped_column(Text)
    #: the input range ``[from_offset, to_offset)`` the transaction committed (or tried to)
    from_offset: Mapped[int] = mapped_column(BigInteger)
    to_offset: Mapped[int] = mapped_column(BigInteger)
    #: what the whole transaction wrote to the output topic
    output_batches: Mapped[int] = mapped_column(BigInteger)
    output_records: Mapped[int] = mapped_column(BigInteger)
    abort_cause: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: the audit's verdict (1: exactly once held) and when it ran
    audit_ok: Mapped[int] = mapped_column(BigInteger)
    audited_ms: Mapped[int] = mapped_column(BigInteger)
