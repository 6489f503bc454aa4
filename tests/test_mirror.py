"""The SQLite mirror: equal to the logs after any workload, a rebuild and a crash;
its schema owned by Alembic, constrained by the enums and readable by Spark."""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError, OperationalError

from exactly.app import Broker
from exactly.app.cli.main import main as cli_main
from exactly.app.engine.mirror_source import EngineMirrorSource
from exactly.coordinator import mirror as mirror_module
from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.mirror import MIRRORED_TOPICS, Mirror
from exactly.coordinator.mirror_db import (
    UPGRADE_ERRORS,
    MigrationError,
    alembic_config,
    db_path,
    head_revision,
    reader_engine,
    upgrade,
    writer_engine,
)
from exactly.coordinator.mirror_models import TXN_STATES, Base
from exactly.coordinator.offsets_log import GroupValue, MemberRecord, OffsetValue
from exactly.coordinator.transaction_state import TransactionMetadata, TransactionState, TxnTransitMetadata
from exactly.storage import topic_id
from exactly.storage.clock import FakeClock
from exactly.storage.errors import OffsetOutOfRangeError
from exactly.storage.partition_log import ReadResult
from exactly.storage.record_batch import SimpleRecord, encode_batch, iter_headers
from tests.mirror_oracle import expected_state_from_logs, read_state
from tests.mirror_crash_child import BROKER_CONFIG
from tests.raw_txn import RawTxn
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
#: the newest migration: what a fresh or upgraded database is at
HEAD = ScriptDirectory.from_config(alembic_config(":memory:")).get_current_head()
S = TransactionState
T0 = 1_700_000_000_000
USER_TOPICS = {"orders": 3, "payments": 2}


# -- writing coordinator records ---------------------------------------------------------------


def open_broker(data_dir: Path, clock: FakeClock | None = None, **config: object) -> Broker:
    """A broker with both internal topics (two partitions each) and the user topics
    the workload's transactions name (a reopened coordinator rolls them forward);
    its scheduled jobs are off unless ``config`` turns them on."""
    broker = Broker(data_dir, clock=clock, **{**BROKER_CONFIG, **config})

    async def create_internal_topics() -> None:  # clients may not; the coordinators do on first use
        for topic in (transaction_log.TOPIC, offsets_log.TOPIC):
            await broker.engine.topics.ensure_internal_topic(topic)

    broker.engine.call(create_internal_topics)
    for topic, partitions in USER_TOPICS.items():
        if topic not in broker.engine.call(broker.engine.topics.partition_counts, [topic]):
            broker.create_topic(topic, partitions)
    return broker


def append(broker: Broker, topic: str, partition: int, batch: bytes) -> int:
    """Append a batch to an internal topic as a coordinator does; its base offset."""
    return broker.engine.call(broker.engine.partitions.append_internal, topic, partition, batch).base_offset


def marker(broker: Broker, topic: str, partition: int, producer_id: int, producer_epoch: int,
           commit: bool) -> int:
    """Write a COMMIT/ABORT marker as the transaction coordinator does (the engine's
    internal path; no client may); its offset."""
    return broker.engine.call(broker.engine.partitions.write_txn_marker, topic, partition, producer_id,
                              producer_epoch, 0, commit).base_offset


def txn_record(tid: str, transit: TxnTransitMetadata | None) -> SimpleRecord:
    value = None if transit is None else transaction_log.encode_value(transit)
    return SimpleRecord(value, key=transaction_log.encode_key(tid), timestamp=T0)


def offset_record(group: str, topic: str, partition: int, offset: int | None, ts: int = T0) -> SimpleRecord:
    value = None if offset is None else offsets_log.encode_offset_value(
        OffsetValue(offset, -1, f"m{offset}", ts))
    return SimpleRecord(value, key=offsets_log.encode_offset_key(group, topic, partition), timestamp=ts)


def group_record(group: str, generation: int | None, ts: int = T0) -> SimpleRecord:
    value = None
    if generation is not None:
        members = tuple(MemberRecord(f"member-{i}", None, f"client-{i}", "/127.0.0.1", 300_000, 45_000,
                                     b"sub", b"assign") for i in range(generation % 3))
        value = offsets_log.encode_group_value(
            GroupValue("consumer", generation, "range", members[0].member_id if members else None, ts, members))
    return SimpleRecord(value, key=offsets_log.encode_group_key(group), timestamp=ts)


def new_txn_id(tid: str) -> TransactionMetadata:
    return TransactionMetadata(tid, producer_id=-1, last_producer_id=-1, producer_epoch=-1,
                               last_producer_epoch=-1, txn_timeout_ms=60_000, state=S.EMPTY)


def transition(meta: TransactionMetadata, prepare: Callable[..., TxnTransitMetadata],
               *args: object) -> TxnTransitMetadata:
    """Move ``meta`` the coordinator's way (prepare, log, complete); the transit to log."""
    transit = prepare(*args)
    meta.complete_transition(transit)
    return transit


@dataclass
class TxnProducer:
    """A producer committing offsets inside transactions (TxnOffsetCommit)."""

    producer_id: int
    epoch: int = 0
    sequences: dict[int, int] = field(default_factory=dict)
    open_partitions: set[int] = field(default_factory=set)


class Workload:
    """Seeded random, valid coordinator traffic on the internal topics of a broker:
    transactional ids moving through the state machine (sometimes expiring),
    offset commits, group metadata, tombstones, and transactional offset commits
    ended by COMMIT or ABORT markers, several producers interleaved."""

    def __init__(self, broker: Broker, seed: int) -> None:
        self.broker = broker
        self.rng = random.Random(seed)
        self.now = T0
        source = EngineMirrorSource(broker.engine)
        self.txn_partitions = source.partitions_of(transaction_log.TOPIC)
        self.offsets_partitions = source.partitions_of(offsets_log.TOPIC)
        self.txn_ids: dict[str, TransactionMetadata] = {}
        self.next_producer_id = 1
        self.producers = [TxnProducer(5000 + i) for i in range(3)]

    def run(self, steps: int, on_step: Callable[[int], None] | None = None) -> None:
        actions = [(self.txn_step, 5), (self.offset_commit, 3), (self.group_metadata, 1),
                   (self.txn_offset_commit, 3), (self.end_txn_offsets, 2)]
        for step in range(steps):
            self.now += self.rng.randint(1, 50)
            action = self.rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
            action()
            if on_step is not None:
                on_step(step)

    # __transaction_state

    def txn_step(self) -> None:
        """One transition for each of one to three transactional ids, one batch per partition."""
        by_partition: dict[int, list[SimpleRecord]] = {}
        for tid in self.rng.sample([f"txn-{i}" for i in range(6)], self.rng.randint(1, 3)):
            partition = transaction_log.partition_for(tid, self.txn_partitions)
            by_partition.setdefault(partition, []).append(txn_record(tid, self.transition(tid)))
        for partition, records in by_partition.items():
            append(self.broker, transaction_log.TOPIC, partition, encode_batch(records))

    def transition(self, tid: str) -> TxnTransitMetadata | None:
        """The next transit of ``tid`` (None: it expired, a tombstone)."""
        meta, now, rng = self.txn_ids.get(tid), self.now, self.rng
        if meta is None:
            meta = self.txn_ids[tid] = new_txn_id(tid)
            return transition(meta, meta.prepare_new_producer_id, self._producer_id(), 60_000, now)
        if meta.state is S.ONGOING:
            if rng.random() < 0.3:
                return transition(meta, meta.prepare_add_partitions, self._partitions(), now)
            return transition(meta, meta.prepare_abort_or_commit, rng.random() < 0.6, now)
        if meta.state.is_prepared:
            return transition(meta, meta.prepare_complete, now)
        roll = rng.random()
        if roll < 0.1:
            transition(meta, meta.prepare_dead, now)
            del self.txn_ids[tid]
            return None
        if roll < 0.2:
            return transition(meta, meta.prepare_increment_epoch, 30_000, now)
        if roll < 0.25:
            return transition(meta, meta.prepare_new_producer_id, self._producer_id(), 60_000, now)
        return transition(meta, meta.prepare_add_partitions, self._partitions(), now)

    def _producer_id(self) -> int:
        self.next_producer_id += 1
        return self.next_producer_id

    def _partitions(self) -> set[tuple[str, int]]:
        pairs = [(t, p) for t, n in USER_TOPICS.items() for p in range(n)]
        return set(self.rng.sample(pairs, self.rng.randint(1, 3)))

    # __consumer_offsets

    def _group(self) -> tuple[str, int]:
        group = f"group-{self.rng.randrange(4)}"
        return group, transaction_log.partition_for(group, self.offsets_partitions)

    def _offsets(self, group: str, tombstones: float) -> list[SimpleRecord]:
        records = []
        for _ in range(self.rng.randint(1, 3)):
            topic = self.rng.choice(list(USER_TOPICS))
            offset = None if self.rng.random() < tombstones else self.rng.randrange(10_000)
            records.append(offset_record(group, topic, self.rng.randrange(USER_TOPICS[topic]), offset, self.now))
        return records

    def offset_commit(self) -> None:
        group, partition = self._group()
        append(self.broker, offsets_log.TOPIC, partition, encode_batch(self._offsets(group, 0.1)))

    def group_metadata(self) -> None:
        group, partition = self._group()
        generation = None if self.rng.random() < 0.15 else self.rng.randrange(1, 100)
        append(self.broker, offsets_log.TOPIC, partition, encode_batch([group_record(group, generation, self.now)]))

    def txn_offset_commit(self) -> None:
        producer = self.rng.choice(self.producers)
        group, partition = self._group()
        records = self._offsets(group, 0.05)
        sequence = producer.sequences.get(partition, 0)
        append(self.broker, offsets_log.TOPIC, partition, encode_batch(
            records, producer_id=producer.producer_id, producer_epoch=producer.epoch,
            base_sequence=sequence, transactional=True))
        producer.sequences[partition] = sequence + len(records)
        producer.open_partitions.add(partition)

    def end_txn_offsets(self) -> None:
        producer = self.rng.choice(self.producers)
        commit = self.rng.random() < 0.6
        for partition in sorted(producer.open_partitions):
            marker(self.broker, offsets_log.TOPIC, partition, producer.producer_id, producer.epoch, commit)
        producer.open_partitions.clear()
        if self.rng.random() < 0.3:  # InitProducerId again: a new epoch starts at sequence 0
            producer.epoch += 1
            producer.sequences.clear()


# -- fixtures and helpers -------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    with open_broker(tmp_path / "data", clock) as b:
        yield b


@pytest.fixture
def source(broker: Broker) -> EngineMirrorSource:
    return EngineMirrorSource(broker.engine)


@pytest.fixture
def mirror(tmp_path: Path, source: EngineMirrorSource, clock: FakeClock) -> Iterator[Mirror]:
    with Mirror(tmp_path / "exactly.db", source, clock=clock) as m:
        yield m


def assert_mirrors_logs(db: Path, source) -> None:
    actual, expected = read_state(db), expected_state_from_logs(source)
    for table in expected:
        assert actual[table] == expected[table], f"table {table} differs from the logs"


def rows(db: Path, sql: str, **params) -> list[dict]:
    engine = reader_engine(db)
    try:
        with engine.connect() as conn:
            return [dict(row) for row in conn.execute(text(sql), params).mappings()]
    finally:
        engine.dispose()


def execute(db: Path, sql: str, **params) -> None:
    """One statement in a transaction of the mirror's writer."""
    engine = writer_engine(db)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


# -- the mirror equals the logs --------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_workload_mirrors_the_logs_incrementally_and_after_the_db_is_deleted(
        tmp_path: Path, broker: Broker, source: EngineMirrorSource, mirror: Mirror, seed: int) -> None:
    workload = Workload(broker, seed)
    checks = random.Random(-seed)
    checkpoints = set(checks.sample(range(250), 3))

    def maybe_check(step: int) -> None:
        if checks.random() < 0.1:
            mirror.catch_up()
        if step in checkpoints:
            mirror.catch_up()
            assert_mirrors_logs(mirror.path, source)

    workload.run(250, maybe_check)
    mirror.catch_up()
    assert_mirrors_logs(mirror.path, source)
    state = read_state(mirror.path)
    assert state["transactions"] and state["group_offsets"] and state["groups"]
    assert {row["status"] for row in state["group_offsets"]} == {"committed", "pending"}

    mirror.close()
    mirror.path.unlink()
    with Mirror(mirror.path, source, fetch_max_bytes=200) as rebuilt:
        assert rebuilt.catch_up() > 0
    assert read_state(mirror.path) == state


def test_a_committed_transaction_becomes_one_row_with_the_prepared_partitions(
        broker: Broker, source: EngineMirrorSource, mirror: Mirror) -> None:
    meta = new_txn_id("billing")
    transits = [transition(meta, meta.prepare_new_producer_id, 7, 60_000, T0),
                transition(meta, meta.prepare_add_partitions, {("orders", 1)}, T0 + 10),
                transition(meta, meta.prepare_add_partitions, {("orders", 0), ("payments", 1)}, T0 + 20),
                transition(meta, meta.prepare_abort_or_commit, True, T0 + 30),
                transition(meta, meta.prepare_complete, T0 + 40)]
    partition = transaction_log.partition_for("billing", 2)
    for transit in transits[:-1]:
        append(broker, transaction_log.TOPIC, partition, encode_batch([txn_record("billing", transit)]))
    assert mirror.catch_up() == 4
    assert rows(mirror.path, "SELECT count(*) AS n FROM transactions") == [{"n": 0}]
    complete_at = append(broker, transaction_log.TOPIC, partition,
                         encode_batch([txn_record("billing", transits[-1])]))
    assert mirror.catch_up() == 1

    assert rows(mirror.path, "SELECT * FROM transactions") == [{
        "id": 1, "transactional_id": "billing", "producer_id": 7, "producer_epoch": 0, "outcome": "COMMIT",
        "partitions": '["orders-0", "orders-1", "payments-1"]', "start_ms": T0 + 10, "end_ms": T0 + 40,
        "log_partition": partition, "log_offset": complete_at, "abort_cause": None, "abort_actor": None,
        "transaction_version": 0}]
    [current] = rows(mirror.path, "SELECT * FROM transactional_ids")
    assert (current["state"], current["partitions"], current["txn_start_ms"], current["source_offset"]) == (
        "CompleteCommit", "[]", T0 + 10, complete_at)
    assert rows(mirror.path, "SELECT * FROM producer_ids") == [{
        "producer_id": 7, "transactional_id": "billing", "producer_epoch": 0,
        "first_seen_ms": T0, "last_seen_ms": T0 + 40}]

    append(broker, transaction_log.TOPIC, partition, encode_batch([txn_record("billing", None)]))
    mirror.catch_up()
    assert rows(mirror.path, "SELECT count(*) AS n FROM transactional_ids") == [{"n": 0}]
    assert rows(mirror.path, "SELECT count(*) AS n FROM producer_ids") == [{"n": 0}]
    assert rows(mirror.path, "SELECT count(*) AS n FROM transactions") == [{"n": 1}]


def test_transactional_offsets_are_pending_until_the_marker(
        broker: Broker, source: EngineMirrorSource, mirror: Mirror) -> None:
    partition = transaction_log.partition_for("g", 2)

    def txn_commit(producer_id: int, sequence: int, offset: int) -> None:
        append(broker, offsets_log.TOPIC, partition, encode_batch(
            [offset_record("g", "orders", 0, offset)], producer_id=producer_id, producer_epoch=0,
            base_sequence=sequence, transactional=True))

    def offsets() -> list[tuple]:
        return [tuple(r.values()) for r in rows(
            mirror.path, "SELECT producer_id, status, offset FROM group_offsets ORDER BY producer_id")]

    append(broker, offsets_log.TOPIC, partition, encode_batch([offset_record("g", "orders", 0, 10)]))
    txn_commit(100, 0, 20)
    txn_commit(200, 0, 30)
    mirror.catch_up()
    assert offsets() == [(-1, "committed", 10), (100, "pending", 20), (200, "pending", 30)]

    marker(broker, offsets_log.TOPIC, partition, 100, 0, commit=True)
    marker(broker, offsets_log.TOPIC, partition, 200, 0, commit=False)
    mirror.catch_up()
    assert offsets() == [(-1, "committed", 20)]

    # A plain commit written after the pending one but before its marker wins (Kafka's rule).
    txn_commit(100, 1, 40)
    append(broker, offsets_log.TOPIC, partition, encode_batch([offset_record("g", "orders", 0, 50)]))
    marker(broker, offsets_log.TOPIC, partition, 100, 0, commit=True)
    mirror.catch_up()
    assert offsets() == [(-1, "committed", 50)]
    assert_mirrors_logs(mirror.path, source)


def test_what_the_coordinators_write_is_mirrored(broker: Broker, source: EngineMirrorSource,
                                                  mirror: Mirror) -> None:
    producer = broker.producer(transactional_id="pipeline")
    producer.init_transactions()
    for offset, commit in ((42, True), (43, False)):
        producer.begin_transaction()
        producer.send("orders", b"value", key=b"key").get(timeout=10)
        producer.send_offsets_to_transaction({("payments", 1): offset}, "readers")
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    mirror.catch_up()
    assert_mirrors_logs(mirror.path, source)

    finished = rows(mirror.path, "SELECT outcome, partitions FROM transactions ORDER BY id")
    assert [row["outcome"] for row in finished] == ["COMMIT", "ABORT"]
    offsets_partition = f"{offsets_log.TOPIC}-{transaction_log.partition_for('readers', 2)}"
    for row in finished:
        partitions = json.loads(row["partitions"])
        assert offsets_partition in partitions and any(p.startswith("orders-") for p in partitions)
    assert rows(mirror.path, "SELECT group_id, topic, partition, producer_id, status, offset FROM group_offsets") == [
        {"group_id": "readers", "topic": "payments", "partition": 1, "producer_id": -1,
         "status": "committed", "offset": 42}]
    assert rows(mirror.path, "SELECT state FROM transactional_ids") == [{"state": "CompleteAbort"}]


def test_replaying_the_transaction_log_adds_no_finished_transaction_twice(
        broker: Broker, source: EngineMirrorSource, mirror: Mirror) -> None:
    Workload(broker, seed=17).run(80)
    mirror.catch_up()
    before = read_state(mirror.path)
    assert before["transactions"]
    # as if these batches had been applied without their progress
    execute(mirror.path, "UPDATE mirror_progress SET next_offset = 0 WHERE topic = :topic", topic=transaction_log.TOPIC)
    assert mirror.catch_up() > 0
    assert read_state(mirror.path) == before


class ListSource:
    """A MirrorSource over batches kept in memory, one partition per internal topic,
    with gaps in the offsets as a log cleaner leaves them."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[bytes]] = {(topic, 0): [] for topic in MIRRORED_TOPICS}

    def append(self, topic: str, base_offset: int, records: list[SimpleRecord]) -> None:
        self.logs[(topic, 0)].append(encode_batch(records, base_offset=base_offset))

    def _end(self, topic: str, partition: int) -> int:
        batches = self.logs[(topic, partition)]
        return 0 if not batches else next(iter_headers(batches[-1]))[1].next_offset

    def partitions_of(self, topic: str) -> int | None:
        return 1

    def log_start_offset(self, topic: str, partition: int) -> int:
        return 0

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult:
        end = self._end(topic, partition)
        if not 0 <= offset <= end:
            raise OffsetOutOfRangeError(f"{offset} outside [0, {end}]")
        batches = [b for b in self.logs[(topic, partition)] if next(iter_headers(b))[1].last_offset >= offset]
        records = b"".join(batches[:1])
        next_offset = next(iter_headers(records))[1].next_offset if records else offset
        return ReadResult(records, end, end, 0, None, next_offset)

    def partition_stats(self) -> list:
        return []

    def producer_stats(self) -> list:
        return []

    def acl_names(self, record) -> dict[str, str]:
        raise AssertionError("no ACL records here")


def test_gaps_left_by_compaction_are_skipped_and_a_lone_complete_record_still_counts(tmp_path: Path) -> None:
    source = ListSource()
    meta = new_txn_id("t")
    transition(meta, meta.prepare_new_producer_id, 3, 60_000, T0)
    transition(meta, meta.prepare_add_partitions, {("orders", 2)}, T0 + 1)
    transition(meta, meta.prepare_abort_or_commit, False, T0 + 2)
    complete = transition(meta, meta.prepare_complete, T0 + 3)
    # what a cleaner leaves: offsets 0-6 gone, "t" only as its latest record (no Prepare before it)
    source.append(transaction_log.TOPIC, 7, [txn_record("t", complete), txn_record("u", None),
                                             txn_record("u", None)])
    source.append(offsets_log.TOPIC, 4, [offset_record("g", "orders", 2, 11)])
    source.append(offsets_log.TOPIC, 12, [offset_record("g", "orders", 2, 12)])
    db = tmp_path / "exactly.db"
    with Mirror(db, source) as mirror:
        assert mirror.catch_up() == 5
    assert rows(db, "SELECT outcome, partitions, start_ms, end_ms, log_offset FROM transactions") == [
        {"outcome": "ABORT", "partitions": "[]", "start_ms": T0 + 1, "end_ms": T0 + 3, "log_offset": 7}]
    assert rows(db, "SELECT * FROM mirror_progress ORDER BY topic") == [
        {"topic": offsets_log.TOPIC, "partition": 0, "next_offset": 13},
        {"topic": transaction_log.TOPIC, "partition": 0, "next_offset": 10}]
    assert rows(db, "SELECT offset, log_offset FROM group_offsets") == [{"offset": 12, "log_offset": 12}]
    assert_mirrors_logs(db, source)


def test_progress_on_a_vanished_partition_rebuilds(tmp_path: Path) -> None:
    source = ListSource()
    source.append(offsets_log.TOPIC, 0, [offset_record("g", "orders", 0, 1)])
    source.append(transaction_log.TOPIC, 0, [txn_record("t", None)])
    db = tmp_path / "exactly.db"
    with Mirror(db, source) as mirror:
        mirror.catch_up()
        del source.logs[(transaction_log.TOPIC, 0)]
        source.partitions_of = lambda topic: 1 if topic == offsets_log.TOPIC else None
        assert mirror.catch_up() == 1
    assert rows(db, "SELECT topic FROM mirror_progress") == [{"topic": offsets_log.TOPIC}]
    assert_mirrors_logs(db, source)


def test_progress_beyond_the_end_of_a_log_rebuilds(tmp_path: Path, clock: FakeClock) -> None:
    """The logs were wiped and the broker started afresh, but exactly.db stayed."""
    data = tmp_path / "data"
    with open_broker(data, clock) as broker:
        Workload(broker, seed=7).run(60)
        broker.mirror.catch_up()
        assert rows(broker.mirror.path, "SELECT count(*) AS n FROM group_offsets")[0]["n"] > 1
    for child in data.iterdir():
        if not child.name.startswith("exactly.db"):
            shutil.rmtree(child) if child.is_dir() else child.unlink()

    with open_broker(data, clock) as broker:
        mirror = broker.mirror
        group = "fresh"
        append(broker, offsets_log.TOPIC, transaction_log.partition_for(group, 2),
               encode_batch([offset_record(group, "orders", 0, 1)]))
        assert mirror.catch_up() == 1
        assert rows(mirror.path, "SELECT group_id FROM group_offsets") == [{"group_id": group}]
        assert_mirrors_logs(mirror.path, mirror.source)


def test_rebuild_repeats_the_same_rows(broker: Broker, source: EngineMirrorSource, mirror: Mirror) -> None:
    Workload(broker, seed=11).run(80)
    mirror.catch_up()
    before = read_state(mirror.path)
    ids = rows(mirror.path, "SELECT id, log_partition, log_offset FROM transactions ORDER BY id")
    assert mirror.rebuild() > 0
    assert read_state(mirror.path) == before
    assert rows(mirror.path, "SELECT id, log_partition, log_offset FROM transactions ORDER BY id") == ids


# -- snapshots and the background writer -----------------------------------------------------------


def test_refresh_stats_snapshots_offsets_and_producers(
        broker: Broker, source: EngineMirrorSource, mirror: Mirror, clock) -> None:
    for _ in range(3):  # the third instance: epoch 2
        txn = RawTxn(broker, "stats")
    txn.produce("orders", 0, [SimpleRecord(b"a", timestamp=T0)])
    broker.produce("orders", 0, encode_batch([SimpleRecord(b"b"), SimpleRecord(b"c")]))
    mirror.refresh_stats()
    orders_id = topic_id.to_string(broker.engine.topics.topic_info("orders").topic_id)
    assert rows(mirror.path, "SELECT * FROM partitions WHERE topic = 'orders' AND partition = 0") == [{
        "topic": "orders", "partition": 0, "high_watermark": 3, "last_stable_offset": 0,
        "log_start_offset": 0, "log_end_offset": 3, "updated_ms": clock.now_ms(), "topic_id": orders_id}]
    assert rows(mirror.path, "SELECT * FROM partition_producers") == [{
        "topic": "orders", "partition": 0, "producer_id": txn.pid, "producer_epoch": 2, "coordinator_epoch": -1,
        "last_sequence": 0, "last_offset": 0, "last_timestamp_ms": T0, "txn_first_offset": 0,
        "updated_ms": clock.now_ms()}]

    txn.commit()
    clock.advance(5)
    mirror.refresh_stats()
    assert rows(mirror.path, "SELECT last_stable_offset, updated_ms FROM partitions WHERE topic = 'orders' AND partition = 0") == [
        {"last_stable_offset": 4, "updated_ms": clock.now_ms()}]
    assert rows(mirror.path, "SELECT txn_first_offset FROM partition_producers") == [{"txn_first_offset": None}]
    assert len(rows(mirror.path, "SELECT * FROM partitions")) == 3 + 2 + 2 + 2  # user and internal topics


def test_a_broker_keeps_its_mirror_current_with_its_own_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with open_broker(data, **{"exactly.jobs.enable": True, "exactly.mirror.interval.ms": 20}) as broker:
        source = EngineMirrorSource(broker.engine)
        workload = Workload(broker, seed=5)
        workload.run(60)
        eventually(lambda: read_state(db_path(data)) == expected_state_from_logs(source), 10,
                   "the broker's mirror job to catch up")
        assert rows(db_path(data), "SELECT count(*) AS n FROM partitions") == [{"n": 9}]


def test_closing_a_broker_brings_its_mirror_up_to_date(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with open_broker(data, **{"exactly.jobs.enable": True, "exactly.mirror.interval.ms": 3_600_000}) as broker:
        Workload(broker, seed=9).run(40)
        expected = expected_state_from_logs(EngineMirrorSource(broker.engine))
        assert read_state(db_path(data)) != expected, "no round is due for an hour"
    assert read_state(db_path(data)) == expected


def test_readers_cannot_write_and_the_database_is_in_wal_mode(mirror: Mirror) -> None:
    engine = reader_engine(mirror.path)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            with pytest.raises(OperationalError, match="readonly"):
                conn.execute(text("INSERT INTO mirror_progress VALUES ('x', 0, 1)"))
    finally:
        engine.dispose()


# -- a writer killed at any point ----------------------------------------------------------------


def test_a_batch_that_fails_half_way_leaves_neither_rows_nor_progress(
        broker: Broker, source: EngineMirrorSource, mirror: Mirror, monkeypatch) -> None:
    Workload(broker, seed=19).run(60)
    calls = itertools.count()
    record_progress = mirror_module._Database.progress

    def progress_then_fail(self, topic: str, partition: int, next_offset: int) -> None:
        record_progress(self, topic, partition, next_offset)
        if next(calls) == 20:
            raise OSError("disk full")  # after the batch's rows and its progress were written

    monkeypatch.setattr(mirror_module._Database, "progress", progress_then_fail)
    with pytest.raises(OSError, match="disk full"):
        mirror.catch_up()
    progress = {(r["topic"], r["partition"]): r["next_offset"]
                for r in rows(mirror.path, "SELECT * FROM mirror_progress")}
    assert sum(progress.values()) > 0
    assert read_state(mirror.path) == expected_state_from_logs(source, upto=progress)
    monkeypatch.undo()
    mirror.catch_up()
    assert_mirrors_logs(mirror.path, source)


def test_a_killed_writer_leaves_rows_and_progress_consistent(tmp_path: Path) -> None:
    data, db = tmp_path / "data", tmp_path / "data" / "exactly.db"
    with open_broker(data) as broker:
        Workload(broker, seed=3).run(400)
    rng = random.Random(3)
    partial = 0
    for _ in range(8):
        child = subprocess.Popen([sys.executable, "-m", "tests.mirror_crash_child", str(data)],
                                 cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.02, 0.3))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        progress = {(r["topic"], r["partition"]): r["next_offset"]
                    for r in rows(db, "SELECT * FROM mirror_progress")}
        with Broker(data, **BROKER_CONFIG) as broker:
            source = EngineMirrorSource(broker.engine)
            assert read_state(db) == expected_state_from_logs(source, upto=progress)
            complete = expected_state_from_logs(source)["mirror_progress"]
        partial += progress != {(r["topic"], r["partition"]): r["next_offset"] for r in complete}
    assert partial, "every kill landed after a finished catch-up; the test proved nothing"

    with Broker(data, **BROKER_CONFIG) as broker:
        broker.mirror.catch_up()
        assert_mirrors_logs(db, broker.mirror.source)


# -- the schema -------------------------------------------------------------------------------------


def test_migrations_and_models_agree(tmp_path: Path) -> None:
    db = tmp_path / "exactly.db"
    assert upgrade(db) == (None, HEAD)
    engine = writer_engine(db)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True,
                                                              "compare_server_default": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def check_constraints(engine) -> dict[str, set[str]]:
    with engine.connect() as conn:
        ddl = conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'table'")).all()
    return {name: set(re.findall(r"CONSTRAINT \w+ CHECK \((.*)\)", sql)) for name, sql in ddl
            if name != "alembic_version"}


def test_check_constraints_of_the_migration_are_the_ones_generated_from_the_enums(tmp_path: Path) -> None:
    """Alembic's comparison ignores CHECK constraints: compare their SQL directly."""
    upgrade(tmp_path / "migrated.db")
    migrated = writer_engine(tmp_path / "migrated.db")
    from_models = create_engine(f"sqlite:///{tmp_path / 'models.db'}")
    Base.metadata.create_all(from_models)
    try:
        expected = check_constraints(from_models)
        assert check_constraints(migrated) == expected
        [states] = expected["transactional_ids"]
        assert all(f"'{display}'" in states for display in TXN_STATES)
    finally:
        migrated.dispose()
        from_models.dispose()


TXN_ID_ROW = "INSERT INTO transactional_ids VALUES ('t', 1, 0, :value, 60000, '[]', -1, 0, 0, 0, 0)"
FINISHED_ROW = "INSERT INTO transactions VALUES (1, 't', 1, 0, :value, '[]', 0, 1, 0, 0, NULL, NULL, 0)"
ABORTED_ROW = "INSERT INTO transactions VALUES (1, 't', 1, 0, 'ABORT', '[]', 0, 1, 0, 0, :value, 'me', 0)"
OFFSET_ROW = "INSERT INTO group_offsets VALUES ('g', 't', 0, :producer, :value, 5, '', 0, 0, 0)"


@pytest.mark.parametrize("sql, bad, good", [
    (TXN_ID_ROW, {"value": "Prepared"}, {"value": "PrepareCommit"}),
    (TXN_ID_ROW, {"value": "PREPARE_COMMIT"}, {"value": "PrepareCommit"}),
    (FINISHED_ROW, {"value": "commit"}, {"value": "COMMIT"}),
    (ABORTED_ROW, {"value": "TIMEOUT"}, {"value": "timeout"}),
    (OFFSET_ROW, {"value": "stable", "producer": -1}, {"value": "committed", "producer": -1}),
    (OFFSET_ROW, {"value": "pending", "producer": -1}, {"value": "committed", "producer": -1}),
    (OFFSET_ROW, {"value": "committed", "producer": 7}, {"value": "pending", "producer": 7}),
])
def test_check_constraints_reject_values_outside_the_enums(tmp_path: Path, sql: str, bad: dict,
                                                           good: dict) -> None:
    db = tmp_path / "exactly.db"
    upgrade(db)
    engine = writer_engine(db)
    try:
        with engine.begin() as conn:
            with pytest.raises(IntegrityError, match="CHECK constraint failed"):
                conn.execute(text(sql), bad)
        with engine.begin() as conn:  # the same row with a valid value goes in
            conn.execute(text(sql), good)
    finally:
        engine.dispose()


def test_ids_offsets_epochs_and_times_are_bigint_for_spark(tmp_path: Path) -> None:
    """sqlite-jdbc reads INTEGER as a 32-bit int, silently wrapping epoch ms."""
    db = tmp_path / "exactly.db"
    upgrade(db)
    wide = re.compile(r"(^id$|_id$|_ms$|offset$|epoch$|watermark$|sequence$|^generation$)")
    text_ids = {"transactional_id", "group_id", "acls.id", "topic_id"}  # an ACL's and a topic's id are UUIDs
    engine = reader_engine(db)
    checked = 0
    try:
        with engine.connect() as conn:
            for table in Base.metadata.tables:
                for _, name, declared, *_ in conn.execute(text(f"PRAGMA table_info({table})")):
                    assert declared in ("TEXT", "BIGINT", "INTEGER"), f"{table}.{name} is {declared}"
                    if declared == "INTEGER":  # Kafka's int32 partition numbers only
                        assert name.endswith("partition"), f"{table}.{name} is INTEGER"
                    if wide.search(name) and not {name, f"{table}.{name}"} & text_ids:
                        assert declared == "BIGINT", f"{table}.{name} is {declared}"
                        checked += 1
    finally:
        engine.dispose()
    assert checked > 30  # the rule matched the columns it is about


def test_downgrade_to_nothing_then_upgrade_again(tmp_path: Path) -> None:
    db = tmp_path / "exactly.db"
    upgrade(db)
    engine = writer_engine(db)
    try:
        with engine.begin() as conn:
            config = alembic_config(db)
            config.attributes["connection"] = conn
            command.downgrade(config, "base")
        assert check_constraints(engine) == {}
    finally:
        engine.dispose()
    assert upgrade(db) == (None, HEAD)


def _migrate(db: Path, revision: str, down: bool = False) -> None:
    engine = writer_engine(db)
    try:
        with engine.begin() as conn:
            config = alembic_config(db)
            config.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(config, revision)
    finally:
        engine.dispose()


def test_revision_0006_adds_topic_ids_to_the_partitions_snapshot_and_keeps_its_rows(
        tmp_path: Path, clock: FakeClock) -> None:
    """A database at 0005 keeps its rows through the upgrade (no topic id until the next
    snapshot, which gives each partition its topic's id -- a new one for a topic created
    again under its name) and through the downgrade back."""
    db = tmp_path / "exactly.db"
    _migrate(db, "0005")
    row = {"topic": "orders", "partition": 0, "high_watermark": 3, "last_stable_offset": 3,
           "log_start_offset": 0, "log_end_offset": 3, "updated_ms": T0}
    engine = writer_engine(db)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO partitions VALUES (:topic, :partition, :high_watermark, "
                              ":last_stable_offset, :log_start_offset, :log_end_offset, :updated_ms)"), row)
    finally:
        engine.dispose()
    assert upgrade(db) == ("0005", HEAD)
    assert rows(db, "SELECT * FROM partitions") == [{**row, "topic_id": None}]
    with open_broker(tmp_path / "data", clock) as broker, \
            Mirror(db, EngineMirrorSource(broker.engine), clock=clock) as mirror:
        mirror.refresh_stats()
        first = rows(db, "SELECT topic_id FROM partitions WHERE topic = 'orders' AND partition = 0")[0]["topic_id"]
        assert first == topic_id.to_string(broker.engine.topics.topic_info("orders").topic_id)
        broker.engine.call(broker.engine.topics.delete_topic, "orders")
        broker.engine.call(broker.engine.topics.create_topic, "orders", 3)
        mirror.refresh_stats()
        again = rows(db, "SELECT DISTINCT topic_id FROM partitions WHERE topic = 'orders'")
        assert len(again) == 1 and again[0]["topic_id"] not in (None, first)
    _migrate(db, "0005", down=True)
    assert "topic_id" not in rows(db, "SELECT * FROM partitions")[0]


def test_the_head_revision_read_from_the_scripts_is_alembic_s() -> None:
    assert head_revision() == HEAD


def test_a_current_database_opens_without_importing_alembic(tmp_path: Path) -> None:
    """Every broker start opens its mirror; importing Alembic costs 0.25 s of it."""
    db = tmp_path / "exactly.db"
    upgrade(db)
    probe = ("import sys; from exactly.coordinator.mirror_db import upgrade; "
             "upgrade(sys.argv[1]); print('alembic' in sys.modules)")
    opened = subprocess.run([sys.executable, "-c", probe, str(db)], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert (opened.returncode, opened.stdout.strip()) == (0, "False"), opened.stderr


def test_a_database_from_a_newer_version_is_refused_as_an_upgrade_error(tmp_path: Path) -> None:
    db = tmp_path / "exactly.db"
    upgrade(db)
    execute(db, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(MigrationError, match="9999") as refused:
        upgrade(db)
    assert isinstance(refused.value, UPGRADE_ERRORS)


# -- the command line -------------------------------------------------------------------------------


def test_db_upgrade_creates_the_database_and_is_idempotent(tmp_path: Path) -> None:
    data = tmp_path / "fresh" / "data"
    command_line = [sys.executable, "-m", "exactly", "db", "upgrade", "--data-dir", str(data)]
    first = subprocess.run(command_line, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert f"revision {HEAD} (migrated from nothing)" in first.stdout
    db = db_path(data)
    execute(db, "INSERT INTO mirror_progress VALUES ('__consumer_offsets', 0, 42)")

    second = subprocess.run(command_line, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert f"revision {HEAD} (already current)" in second.stdout
    assert rows(db, "SELECT next_offset FROM mirror_progress") == [{"next_offset": 42}]
    assert rows(db, "PRAGMA journal_mode") == [{"journal_mode": "wal"}]
    assert rows(db, "SELECT version_num FROM alembic_version") == [{"version_num": HEAD}]


def test_db_upgrade_on_an_unusable_path_fails_with_one_line(tmp_path: Path, capsys) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    assert cli_main(["db", "upgrade", "--data-dir", str(not_a_dir)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("exactly: cannot migrate") and err.count("\n") == 1


def test_db_rebuild_rederives_the_database_from_the_logs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with open_broker(data) as broker:
        Workload(broker, seed=13).run(50)
    upgrade(db_path(data))
    # wrong rows, as if the mirror had gone astray
    execute(db_path(data), "INSERT INTO groups VALUES ('ghost', 1, 'consumer', NULL, NULL, 0, '[]', 0, 0)")
    configs = [arg for key, value in BROKER_CONFIG.items() for arg in ("--config", f"{key}={value}")]
    assert cli_main(["db", "rebuild", "--data-dir", str(data), *configs]) == 0
    with Broker(data, **BROKER_CONFIG) as broker:
        assert_mirrors_logs(db_path(data), EngineMirrorSource(broker.engine))
    assert not rows(db_path(data), "SELECT * FROM groups WHERE group_id = 'ghost'")
    assert rows(db_path(data), "SELECT count(*) AS n FROM partitions") == [{"n": 9}]
