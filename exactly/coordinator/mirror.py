"""The SQLite mirror: coordinator state derived from the internal topics, for queries.

The logs are the truth; ``<data-dir>/exactly.db`` (tables in
``exactly/coordinator/mirror_models.py``) is a copy that Spark, the web UI and ad-hoc SQL
read. :class:`Mirror` is its only writer. It reads ``__transaction_state`` and
``__consumer_offsets`` batch by batch from where it stopped and applies each batch
in one SQLite transaction that also moves ``mirror_progress`` past it, so a crash
between two batches neither loses nor repeats one. It reads the broker only
through a :class:`MirrorSource` (on the engine's loop, see ``exactly/app/engine/mirror_source.py``)
and writes SQLite on its caller's thread (a scheduled job's), so the engine loop never
waits for SQLite.

What each record becomes:

* a ``__transaction_state`` record replaces its transactional id's row; a tombstone
  deletes it and the id's producer ids. A CompleteCommit/CompleteAbort record also
  adds a ``transactions`` row; its partitions (and start time) come from the
  PrepareCommit/PrepareAbort row it follows, because Kafka clears them in the
  Complete record. If compaction removed that record, the row has no partitions.
  Why an abort happened, and who did it, come from the CompleteAbort record's
  headers (``transaction_log.py``), so a rebuild finds them again.
* an offset commit in ``__consumer_offsets`` replaces the committed offset (producer
  id -1); inside a transactional batch it is the *pending* offset of that producer
  until the producer's COMMIT marker in the same partition makes it the committed
  one (unless a later commit was written meanwhile) or its ABORT marker drops it
  -- Kafka's ``GroupMetadataManager`` loading rules. Group metadata records
  replace the group's row; tombstones delete.
* an AccessControlEntryRecord of ``__cluster_metadata`` (``cluster_metadata.py``) replaces its
  ACL's ``acls`` row, with Kafka's names for the codes (the source names them: the
  coordinator layer keeps codes); a tombstone deletes it. A UserScramCredentialRecord
  replaces its user's and mechanism's ``scram_credentials`` row -- the iterations
  only, never the salt or keys; a tombstone deletes it.

Offsets may have gaps (the log cleaner removes superseded records): the mirror
follows batches, not offsets. If ``mirror_progress`` points past a log's end, or at
a partition that no longer exists, the database no longer matches the logs and is
rebuilt from each log's start. Records that do not decode are logged and skipped.

The rules are applied through :class:`MirrorTarget`, so a test can apply the same
rules to dictionaries and compare them with the database (``tests/mirror_oracle.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, TypedDict

from sqlalchemy import Connection, Engine, RowMapping, Table, delete, func, literal, select
from sqlalchemy.dialects.sqlite import insert

from exactly.coordinator import cluster_metadata, consumer_group_records, offsets_log, transaction_log
from exactly.coordinator.mirror_db import upgrade, writer_engine
from exactly.coordinator.mirror_models import (
    AuditTransaction,
    Acl,
    FinishedTransaction,
    Group,
    GroupOffset,
    MirrorProgress,
    OffsetStatus,
    Partition,
    PartitionProducer,
    ProducerId,
    ScramCredential,
    TransactionalId,
)
from exactly.coordinator.schema import SchemaError
from exactly.coordinator.transaction_state import VALID_PREVIOUS, TxnTransitMetadata
from exactly.storage.clock import Clock, SystemClock
from exactly.storage.errors import InvalidRecordError, OffsetOutOfRangeError
from exactly.storage.partition_log import ReadResult
from exactly.storage.record_batch import NO_PRODUCER_ID, ControlType, RecordBatch, decode_batch, decode_control_record, iter_headers

log = logging.getLogger(__name__)

#: the logs the mirror derives its rows from, in the order it reads them
FETCH_MAX_BYTES = 1 << 20

TXN_IDS_TABLE: Table = TransactionalId.__table__
FINISHED_TABLE: Table = FinishedTransaction.__table__
PRODUCERS_TABLE: Table = ProducerId.__table__
OFFSETS_TABLE: Table = GroupOffset.__table__
GROUPS_TABLE: Table = Group.__table__
PROGRESS_TABLE: Table = MirrorProgress.__table__
ACLS_TABLE: Table = Acl.__table__
SCRAM_TABLE: Table = ScramCredential.__table__
#: tables derived from the logs (cleared by a rebuild)
DERIVED_TABLES: tuple[Table, ...] = (TXN_IDS_TABLE, FINISHED_TABLE, PRODUCERS_TABLE, OFFSETS_TABLE, GROUPS_TABLE, ACLS_TABLE, SCRAM_TABLE, PROGRESS_TABLE)

Row = dict[str, Any]
TopicPartition = tuple[str, int]


class PartitionStats(TypedDict):
    topic: str
    partition: int
    #: the topic's id, Kafka's base64 form
    topic_id: str
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int


class ProducerStats(TypedDict):
    """One producer's state on one partition (Kafka's DescribeProducers)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_offset: int
    last_timestamp_ms: int
    txn_first_offset: int | None


class MirrorSource(Protocol):
    """What the mirror needs from a broker; safe to call from any thread but the engine's."""

    def partitions_of(self, topic: str) -> int | None:
        """How many partitions ``topic`` has; None if it does not exist."""

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from ``offset``, read_uncommitted (up to the high watermark);
        OffsetOutOfRangeError outside [log start, log end]."""

    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def partition_stats(self) -> list[PartitionStats]: ...

    def producer_stats(self) -> list[ProducerStats]: ...

    def acl_names(self, record: cluster_metadata.AclRecord) -> dict[str, str]:
        """Kafka's names of an ACL's codes: ``resource_type``, ``pattern_type``,
        ``operation``, ``permission_type``. :raise ValueError: a code Kafka does not define."""

    def scram_mechanism_name(self, mechanism: int) -> str:
        """Kafka's name of a SCRAM mechanism code: ``SCRAM-SHA-256`` for 1."""


class StaleProgressError(Exception):
    """``mirror_progress`` names a partition that is gone or an offset outside its log."""


# -- rows, as both the database and the in-memory replay build them -----------------------


def partitions_json(partitions: frozenset[tuple[str, int]]) -> str:
    """``["topic-partition", ...]`` sorted by topic, then partition number."""
    return json.dumps([f"{topic}-{partition}" for topic, partition in sorted(partitions)])


def txn_id_row(transactional_id: str, transit: TxnTransitMetadata, partition: int, offset: int) -> Row:
    return {"transactional_id": transactional_id, "producer_id": transit.producer_id,
            "producer_epoch": transit.producer_epoch, "state": transit.state.display,
            "timeout_ms": transit.txn_timeout_ms, "partitions": partitions_json(transit.partitions),
            "txn_start_ms": transit.txn_start_timestamp,
            "last_update_ms": transit.txn_last_update_timestamp,
            "transaction_version": transit.client_transaction_version,
            "source_partition": partition, "source_offset": offset}


def finished_row(transactional_id: str, transit: TxnTransitMetadata,
                 previous: Mapping[str, Any] | RowMapping | None, partition: int, offset: int) -> Row:
    """The ``transactions`` row of a Complete record (without its id); ``previous``
    is the transactional id's row before it, which holds the Prepare record."""
    outcome = transit.state.outcome
    assert outcome is not None, f"a Complete record's state has its outcome, not {transit.state.display}"
    prepared = (previous if previous is not None and previous["producer_id"] == transit.producer_id
                and previous["state"] in {state.display for state in VALID_PREVIOUS[transit.state]} else None)
    return {"transactional_id": transactional_id, "producer_id": transit.producer_id,
            "producer_epoch": transit.producer_epoch, "outcome": outcome.name,
            "partitions": prepared["partitions"] if prepared is not None else partitions_json(transit.partitions),
            "start_ms": prepared["txn_start_ms"] if prepared is not None else transit.txn_start_timestamp,
            "end_ms": transit.txn_last_update_timestamp,
            "log_partition": partition, "log_offset": offset,
            "abort_cause": transit.abort_reason.cause.value if transit.abort_reason else None,
            "abort_actor": transit.abort_reason.actor if transit.abort_reason else None,
            "transaction_version": transit.client_transaction_version}


def producer_row(transactional_id: str, transit: TxnTransitMetadata) -> Row:
    return {"producer_id": transit.producer_id, "transactional_id": transactional_id,
            "producer_epoch": transit.producer_epoch,
            "first_seen_ms": transit.txn_last_update_timestamp,
            "last_seen_ms": transit.txn_last_update_timestamp}


def offset_row(key: offsets_log.OffsetKey, value: offsets_log.OffsetValue, producer_id: int,
               partition: int, offset: int) -> Row:
    status = OffsetStatus.COMMITTED if producer_id == NO_PRODUCER_ID else OffsetStatus.PENDING
    return {"group_id": key.group, "topic": key.topic, "partition": key.partition,
            "producer_id": producer_id, "status": status.value, "offset": value.offset,
            "metadata": value.metadata, "commit_timestamp_ms": value.commit_timestamp,
            "log_partition": partition, "log_offset": offset}


def acl_row(acl_id: bytes, record: cluster_metadata.AclRecord, names: dict[str, str]) -> Row:
    return {"id": str(uuid.UUID(bytes=acl_id)), "resource_name": record.resource_name,
            "principal": record.principal, "host": record.host, **names}


def group_row(group: str, value: offsets_log.GroupValue, partition: int, offset: int) -> Row:
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout, "session_timeout_ms": m.session_timeout}
               for m in value.members]
    return {"group_id": group, "generation": value.generation, "protocol_type": value.protocol_type,
            "protocol": value.protocol, "leader": value.leader,
            "state_timestamp_ms": value.current_state_timestamp, "members": json.dumps(members),
            "log_partition": partition, "log_offset": offset}


# -- applying batches ----------------------------------------------------------------------


class MirrorTarget(Protocol):
    """Where decoded records go: the database or the in-memory replay."""

    def txn_record(self, partition: int, offset: int, record: transaction_log.TxnLogRecord) -> None: ...

    def offset_commit(self, partition: int, offset: int, key: offsets_log.OffsetKey,
                      value: offsets_log.OffsetValue | None, producer_id: int) -> None: ...

    def group_metadata(self, partition: int, offset: int, group: str,
                       value: offsets_log.GroupValue | None) -> None: ...

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None: ...

    def acl(self, acl_id: bytes, record: cluster_metadata.AclRecord | None) -> None: ...

    def scram_credential(self, user_name: str, mechanism: int, iterations: int | None) -> None: ...

    def progress(self, topic: str, partition: int, next_offset: int) -> None: ...


def _apply_cluster_metadata(target: MirrorTarget, key: bytes | None, value: bytes | None) -> None:
    """An ACL record, or a SCRAM credential's (its iterations only) of ``__cluster_metadata``;
    a producer id's owner and a feature's level are not mirrored."""
    found = cluster_metadata.record_type(key)
    if found == cluster_metadata.ACCESS_CONTROL_ENTRY_RECORD:
        target.acl(cluster_metadata.decode_key(key), cluster_metadata.decode_value(value))
        return
    if found in (cluster_metadata.PRODUCER_ID_OWNER_RECORD, cluster_metadata.FEATURE_LEVEL_RECORD):
        return
    user_name, mechanism = cluster_metadata.decode_scram_key(key)
    credential = cluster_metadata.decode_scram_value(value)
    target.scram_credential(user_name, mechanism, None if credential is None else credential.iterations)


def apply_batch(target: MirrorTarget, topic: str, partition: int, batch: RecordBatch) -> None:
    """Decode ``batch`` of an internal topic and hand each record to ``target``."""
    header = batch.header
    for record in batch.records:
        try:
            if topic == transaction_log.TOPIC:
                if not header.is_control:
                    target.txn_record(partition, record.offset,
                                      transaction_log.decode(record.key, record.value, record.headers))
            elif topic == cluster_metadata.TOPIC:
                _apply_cluster_metadata(target, record.key, record.value)
            elif header.is_control:
                control, _ = decode_control_record(record)
                if control in (ControlType.COMMIT, ControlType.ABORT):
                    target.end_txn(partition, header.producer_id, control is ControlType.COMMIT)
            elif consumer_group_records.record_type(record.key) not in consumer_group_records.TYPES:
                # a classic group's or an offset commit (KIP-848 groups' records are not mirrored:
                # the console reads their state live)
                key = offsets_log.decode_key(record.key)
                if isinstance(key, offsets_log.GroupKey):
                    target.group_metadata(partition, record.offset, key.group,
                                          offsets_log.decode_group_value(record.value))
                else:
                    producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
                    target.offset_commit(partition, record.offset, key,
                                         offsets_log.decode_offset_value(record.value), producer_id)
        except (SchemaError, InvalidRecordError, ValueError) as e:  # ValueError: a code no enum has
            log.warning("mirror skips %s-%d offset %d: %s", topic, partition, record.offset, e)
    target.progress(topic, partition, header.next_offset)


def batches(source: MirrorSource, topic: str, partition: int, offset: int,
             max_bytes: int) -> Iterator[RecordBatch]:
    """Every batch of the partition from ``offset`` to its high watermark."""
    while True:
        result = source.fetch(topic, partition, offset, max_bytes)
        if not result.records:
            return
        for position, header in iter_headers(result.records):
            yield decode_batch(result.records[position:position + header.size])
        offset = result.next_offset


#: the internal topics the mirror follows
MIRRORED_TOPICS = (transaction_log.TOPIC, offsets_log.TOPIC, cluster_metadata.TOPIC)


def internal_partitions(source: MirrorSource) -> list[TopicPartition]:
    return [(topic, partition) for topic in MIRRORED_TOPICS
            for partition in range(source.partitions_of(topic) or 0)]


class _Database:
    """Applies records with SQL on a connection inside the writer's transaction."""

    def __init__(self, connection: Connection, source: MirrorSource) -> None:
        self.db = connection
        self.source = source

    def txn_record(self, partition: int, offset: int, record: transaction_log.TxnLogRecord) -> None:
        tid, transit = record.transactional_id, record.transit
        if transit is None:
            self.db.execute(delete(TXN_IDS_TABLE).where(TXN_IDS_TABLE.c.transactional_id == tid))
            self.db.execute(delete(PRODUCERS_TABLE).where(PRODUCERS_TABLE.c.transactional_id == tid))
            return
        if transit.state.is_complete:
            previous = self.db.execute(
                select(TXN_IDS_TABLE).where(TXN_IDS_TABLE.c.transactional_id == tid)).mappings().first()
            next_id = select(func.coalesce(func.max(FINISHED_TABLE.c.id), 0) + 1).scalar_subquery()
            # DO NOTHING: a replayed Complete record (same partition and offset) adds no row
            self.db.execute(insert(FINISHED_TABLE).values(
                id=next_id, **finished_row(tid, transit, previous, partition, offset)).on_conflict_do_nothing())
        self._upsert(TXN_IDS_TABLE, txn_id_row(tid, transit, partition, offset))
        if transit.producer_id >= 0:
            self._upsert(PRODUCERS_TABLE, producer_row(tid, transit), keep=("first_seen_ms",))

    def offset_commit(self, partition: int, offset: int, key: offsets_log.OffsetKey,
                      value: offsets_log.OffsetValue | None, producer_id: int) -> None:
        if value is None:
            c = OFFSETS_TABLE.c
            self.db.execute(delete(OFFSETS_TABLE).where(
                c.group_id == key.group, c.topic == key.topic, c.partition == key.partition,
                c.producer_id == producer_id))
        else:
            self._upsert(OFFSETS_TABLE, offset_row(key, value, producer_id, partition, offset))

    def group_metadata(self, partition: int, offset: int, group: str,
                       value: offsets_log.GroupValue | None) -> None:
        if value is None:
            self.db.execute(delete(GROUPS_TABLE).where(GROUPS_TABLE.c.group_id == group))
        else:
            self._upsert(GROUPS_TABLE, group_row(group, value, partition, offset))

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        c = OFFSETS_TABLE.c
        mine = (c.producer_id == producer_id, c.log_partition == partition)
        if commit:
            moved = [c.offset, c.metadata, c.commit_timestamp_ms, c.log_partition, c.log_offset]
            pending = select(c.group_id, c.topic, c.partition, literal(NO_PRODUCER_ID),
                             literal(OffsetStatus.COMMITTED.value), *moved).where(*mine)
            committed = insert(OFFSETS_TABLE).from_select(
                [c.group_id, c.topic, c.partition, c.producer_id, c.status, *moved], pending)
            self.db.execute(committed.on_conflict_do_update(
                index_elements=[c.group_id, c.topic, c.partition, c.producer_id],
                set_={col.name: committed.excluded[col.name] for col in moved},
                where=committed.excluded.log_offset > c.log_offset))
        self.db.execute(delete(OFFSETS_TABLE).where(*mine))

    def acl(self, acl_id: bytes, record: cluster_metadata.AclRecord | None) -> None:
        if record is None:
            self.db.execute(delete(ACLS_TABLE).where(ACLS_TABLE.c.id == str(uuid.UUID(bytes=acl_id))))
        else:
            self._upsert(ACLS_TABLE, acl_row(acl_id, record, self.source.acl_names(record)))

    def scram_credential(self, user_name: str, mechanism: int, iterations: int | None) -> None:
        """A user's SCRAM credential for ``mechanism`` (a UserScramCredentialRecord, Kafka's
        metadata record 11): its iterations, never its salt or keys; None: removed."""
        c, name = SCRAM_TABLE.c, self.source.scram_mechanism_name(mechanism)
        if iterations is None:
            self.db.execute(delete(SCRAM_TABLE).where(c.user_name == user_name, c.mechanism == name))
        else:
            self._upsert(SCRAM_TABLE, {"user_name": user_name, "mechanism": name, "iterations": iterations})

    def progress(self, topic: str, partition: int, next_offset: int) -> None:
        self._upsert(PROGRESS_TABLE, {"topic": topic, "partition": partition, "next_offset": next_offset})

    def _upsert(self, table: Table, row: Row, keep: tuple[str, ...] = ()) -> None:
        """Insert ``row``, or update every column of the existing one but its key and ``keep``."""
        statement = insert(table).values(row)
        fixed = {col.name for col in table.primary_key} | set(keep)
        self.db.execute(statement.on_conflict_do_update(
            index_elements=list(table.primary_key),
            set_={name: statement.excluded[name] for name in row if name not in fixed}))


class Mirror:
    """The one writer of the mirror database at ``path``.

    Opening creates or migrates the database. A broker runs :meth:`catch_up` and
    :meth:`refresh_stats` as a scheduled job (``exactly/app/engine/scheduler.py``); they may
    also be called directly, and a lock keeps them one at a time.
    """

    def __init__(self, path: Path | str, source: MirrorSource, *, clock: Clock | None = None,
                 fetch_max_bytes: int = FETCH_MAX_BYTES) -> None:
        self.path = Path(path)
        self.source = source
        self.clock = clock or SystemClock()
        self.fetch_max_bytes = fetch_max_bytes
        before, after = upgrade(self.path)
        if before != after:  # Alembic's own lines are quiet: one line says what changed
            log.info("SQLite mirror %s: schema revision %s (migrated from %s)", self.path, after, before or "nothing")
        self._engine: Engine = writer_engine(self.path)
        self._lock = threading.Lock()

    def __enter__(self) -> "Mirror":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------

    def catch_up(self) -> int:
        """Apply every batch appended to the internal topics since the last call;
        returns the number of records read. Rebuilds if the progress is stale."""
        with self._lock:
            try:
                return self._mirror_new()
            except StaleProgressError as e:
                log.warning("rebuilding the SQLite mirror: %s", e)
                self._clear()
                return self._mirror_new()

    def rebuild(self) -> int:
        """Drop every log-derived row and mirror each internal log from its start."""
        with self._lock:
            self._clear()
            return self._mirror_new()

    def refresh_stats(self) -> None:
        """Replace the ``partitions`` and ``partition_producers`` snapshots."""
        partitions = self.source.partition_stats()
        producers = self.source.producer_stats()
        now = self.clock.now_ms()
        with self._lock, self._engine.begin() as db:
            for table, rows in ((Partition.__table__, partitions),
                                (PartitionProducer.__table__, producers)):
                db.execute(delete(table))
                if rows:
                    db.execute(insert(table), [{**row, "updated_ms": now} for row in rows])

    def record_audit(self, group_id: str, input_topic: str, output_topic: str, rows: list[Row]) -> None:
        """Replace the ``audit_transactions`` rows of one audited (group, input, output)
        with ``rows`` (their columns but ``audited_ms``, stamped here)."""
        table = AuditTransaction.__table__
        now = self.clock.now_ms()
        with self._lock, self._engine.begin() as db:
            db.execute(delete(table).where(table.c.group_id == group_id, table.c.input_topic == input_topic,
                                           table.c.output_topic == output_topic))
            if rows:
                db.execute(insert(table), [{**row, "audited_ms": now} for row in rows])

    def _mirror_new(self) -> int:
        partitions = internal_partitions(self.source)
        applied = 0
        with self._engine.connect() as db:
            with db.begin():
                progress = {(row.topic, row.partition): row.next_offset
                            for row in db.execute(select(PROGRESS_TABLE))}
            gone = set(progress) - set(partitions)
            if gone:
                raise StaleProgressError(f"partitions {sorted(gone)} no longer exist")
            target = _Database(db, self.source)
            for topic, partition in partitions:
                start = progress.get((topic, partition))
                if start is None:
                    start = self.source.log_start_offset(topic, partition)
                try:
                    for batch in batches(self.source, topic, partition, start, self.fetch_max_bytes):
                        with db.begin():  # the batch's rows and its progress, or nothing
                            apply_batch(target, topic, partition, batch)
                        applied += len(batch.records)
                except OffsetOutOfRangeError as e:
                    raise StaleProgressError(str(e)) from e
        return applied

    def _clear(self) -> None:
        with self._engine.begin() as db:
            for table in DERIVED_TABLES:
                db.execute(delete(table))

    def close(self) -> None:
        self._engine.dispose()


# -- reading back, and the same state straight from the logs ---------------------------------
