"""The transaction coordinator, request by request, against its module docstring.

Every branch of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn is
driven through the engine the way the listener and the embedded producer reach it
(``engine.call(coordinator.<request>, ...)``) and its Kafka error checked by code
and name. Data goes in as raw transactional batches and comes out through fetch,
so markers, aborted ranges and the LSO are what a consumer would see. Crash cases
are built from the transaction log itself: records appended through the engine's
internal append path, then a reopen.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.producer_id_manager import BLOCK_SIZE
from exactly.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from exactly.storage.clock import FakeClock
from exactly.storage.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import (
    MAX_PRODUCER_EPOCH,
    ControlType,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    encode_batch,
    iter_headers,
)
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch, jobs_config
from tests.waiting import eventually

S = TransactionState
T = "orders"
TIMEOUT = 60_000
SMALL = SMALL_INTERNAL_TOPICS


def open_broker(data: Path, clock: FakeClock, **config: Any) -> Broker:
    return Broker(data, clock=clock, **{**SMALL, **config})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def broker(data: Path, clock: FakeClock, request: pytest.FixtureRequest) -> Iterator[Broker]:
    b = open_broker(data, clock, **{"transactional.id.expiration.ms": 3_600_000}, **jobs_config(request))
    b.create_topic(T, partitions=2)
    yield b
    b.close()


# -- helpers ---------------------------------------------------------------------------

def call(broker: Broker, request: str, *args: Any) -> Any:
    """One coordinator request, on the engine's loop."""
    return broker.engine.call(getattr(broker.engine.transactions.coordinator, request), *args)


def init(broker: Broker, txn_id: str | None, timeout: int = TIMEOUT, pid: int = -1,
         epoch: int = -1) -> tuple[int, int]:
    return call(broker, "init_producer_id", txn_id, timeout, pid, epoch)


def add(broker: Broker, txn_id: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> dict:
    return call(broker, "add_partitions", txn_id, pid, epoch, list(partitions))


def end(broker: Broker, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
    call(broker, "end_txn", txn_id, pid, epoch, commit)


def expect(error: type[KafkaError], code: int, name: str, fn: Callable[..., Any], *args: Any) -> KafkaError:
    with pytest.raises(error) as raised:
        fn(*args)
    assert (raised.value.code, raised.value.name) == (code, name)
    return raised.value


def describe(broker: Broker, txn_id: str) -> TxnTransitMetadata | None:
    async def run() -> TxnTransitMetadata | None:
        return broker.engine.transactions.coordinator.describe(txn_id)
    return broker.engine.call(run)


def wait_for_state(broker: Broker, txn_id: str, state: S, timeout_s: float = 5) -> TxnTransitMetadata:
    return eventually(lambda: (meta := describe(broker, txn_id)) is not None and meta.state is state and meta,
                      timeout_s, f"{txn_id} to reach {state.display}", interval=0.005)


class Producer:
    """A transactional producer speaking raw batches: sequences per partition."""

    def __init__(self, broker: Broker, txn_id: str, pid: int, epoch: int) -> None:
        self.broker, self.txn_id, self.pid, self.epoch = broker, txn_id, pid, epoch
        self.seq: dict[tuple[str, int], int] = {}

    def send(self, partition: int, *values: bytes, topic: str = T) -> int:
        seq = self.seq.get((topic, partition), 0)
        offset = self.broker.produce(topic, partition, data_batch(values, self.pid, self.epoch, seq,
                                                                  transactional=True))
        self.seq[(topic, partition)] = seq + len(values)
        return offset

    def begin(self, *partitions: int) -> None:
        assert add(self.broker, self.txn_id, self.pid, self.epoch, *((T, p) for p in partitions)) == {
            (T, p): None for p in partitions}


def producer(broker: Broker, txn_id: str, timeout: int = TIMEOUT) -> Producer:
    pid, epoch = init(broker, txn_id, timeout)
    return Producer(broker, txn_id, pid, epoch)


def committed(broker: Broker, partition: int = 0, topic: str = T) -> list[bytes]:
    r = broker.fetch(topic, partition, 0, isolation_level="read_committed")
    return [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]


def markers(broker: Broker, partition: int = 0, topic: str = T) -> list[tuple[ControlType, int, int, int]]:
    """(type, producer id, producer epoch, coordinator epoch) of every control batch."""
    r = broker.fetch(topic, partition, 0)
    found = []
    for pos, header in iter_headers(r.records):
        if header.is_control:
            record = decode_batch(r.records[pos:pos + header.size]).records[0]
            kind, coordinator_epoch = decode_control_record(record)
            found.append((kind, header.producer_id, header.producer_epoch, coordinator_epoch))
    return found


def lso(broker: Broker, partition: int = 0) -> int:
    return broker.list_offsets(T, partition, -1, isolation_level="read_committed")


def hw(broker: Broker, partition: int = 0, topic: str = T) -> int:
    return broker.list_offsets(topic, partition, -1)


def txn_log_end(broker: Broker, txn_id: str) -> int:
    return hw(broker, transaction_log.partition_for(txn_id, 3), transaction_log.TOPIC)


def txn_log_records(broker: Broker, txn_id: str) -> list[transaction_log.TxnLogRecord]:
    partition = transaction_log.partition_for(txn_id, 3)
    r = broker.fetch(transaction_log.TOPIC, partition, 0)
    out = []
    for pos, header in iter_headers(r.records):
        for record in decode_batch(r.records[pos:pos + header.size]).records:
            decoded = transaction_log.decode(record.key, record.value)
            if decoded.transactional_id == txn_id:
                out.append(decoded)
    return out


def append_txn_log(broker: Broker, txn_id: str, transit: TxnTransitMetadata | None) -> None:
    """Write a transaction-log record the way the coordinator does, behind its back."""
    value = None if transit is None else transaction_log.encode_value(transit)
    batch = encode_batch([SimpleRecord(value, key=transaction_log.encode_key(txn_id),
                                       timestamp=broker.engine.clock.now_ms())])
    broker.engine.call(broker.engine.topics.ensure_internal_topic, transaction_log.TOPIC)
    broker.engine.call(broker.engine.partitions.append_internal, transaction_log.TOPIC,
                       transaction_log.partition_for(txn_id, 3), batch)


def ids_in_partitions() -> dict[int, list[str]]:
    """A few transactional ids per transaction-log partition (of 3)."""
    by_partition: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for i in range(40):
        name = f"txn-{i}"
        by_partition[transaction_log.partition_for(name, 3)].append(name)
    assert all(len(v) >= 3 for v in by_partition.values())
    return by_partition


class MarkerGate:
    """Holds every marker write of the coordinator until opened -- a WriteTxnMarkers fault
    that never answers (exactly/app/faults/internal_writes.py) -- so a transaction stays
    in PrepareCommit/PrepareAbort as long as the test needs."""

    def __init__(self, broker: Broker) -> None:
        self.fault = broker.faults.add(api="WriteTxnMarkers", action="no-answer")

    @property
    def held(self) -> int:
        """How many marker writes met the gate."""
        return self.fault.fired

    def open(self) -> None:
        self.fault.remove()

    def __enter__(self) -> "MarkerGate":
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()


def in_background(broker: Broker, request: str, *args: Any):
    return broker.engine.schedule(getattr(broker.engine.transactions.coordinator, request), *args)


# -- InitProducerId ----------------------------------------------------------------------

def test_init_without_transactional_id_gives_a_fresh_producer_id_at_epoch_0(broker):
    answers = [init(broker, None, -1) for _ in range(5)]
    assert all(epoch == 0 for _, epoch in answers)
    pids = [pid for pid, _ in answers]
    assert len(set(pids)) == 5 and pids == sorted(pids)
    assert init(broker, "a")[0] not in pids  # transactional ids draw from the same space


def test_producer_ids_never_repeat_across_restarts(data, clock):
    seen: list[int] = []
    for round_ in range(3):
        with open_broker(data, clock) as b:
            mine = [init(b, None, -1)[0] for _ in range(3)] + [init(b, f"round-{round_}")[0]]
            assert min(mine) > max(seen, default=-1), "an id came back after a restart"
            if seen:  # the unused rest of the last durable block is skipped
                assert min(mine) >= (max(seen) // BLOCK_SIZE + 1) * BLOCK_SIZE
            seen += mine
        (data / "exactly.db").unlink(missing_ok=True)  # the SQLite mirror is not where ids live
    assert len(set(seen)) == len(seen)


def test_an_empty_transactional_id_is_invalid_request(broker):
    expect(InvalidRequestError, 42, "INVALID_REQUEST", init, broker, "")


@pytest.mark.parametrize("timeout", [0, -1, -60_000, 900_001])
def test_a_timeout_outside_the_maximum_is_invalid_transaction_timeout(broker, timeout):
    expect(InvalidTransactionTimeoutError, 50, "INVALID_TRANSACTION_TIMEOUT", init, broker, "a", timeout)
    assert describe(broker, "a") is None


def test_the_timeout_maximum_is_configurable_and_inclusive(data, clock):
    with open_broker(data, clock, **{"transaction.max.timeout.ms": 5_000}) as b:
        assert init(b, "a", 5_000)[1] == 0
        expect(InvalidTransactionTimeoutError, 50, "INVALID_TRANSACTION_TIMEOUT", init, b, "a", 5_001)
        assert describe(b, "a").producer_epoch == 0


def test_a_new_id_gets_epoch_0_and_a_reinit_the_same_producer_id_one_epoch_up(broker):
    pid, epoch = init(broker, "a")
    assert epoch == 0
    assert init(broker, "a", 1234) == (pid, 1)
    assert init(broker, "a") == (pid, 2)
    meta = describe(broker, "a")
    assert (meta.state, meta.txn_timeout_ms) == (S.EMPTY, TIMEOUT)
    assert init(broker, "b")[0] != pid
    # every InitProducerId is in the log before it is answered
    assert [(r.transit.producer_id, r.transit.producer_epoch) for r in txn_log_records(broker, "a")] == [
        (pid, 0), (pid, 1), (pid, 2)]


def test_reinit_with_an_open_transaction_aborts_it_and_bumps_the_epoch_twice(broker):
    old = producer(broker, "a")
    old.begin(0, 1)
    old.send(0, b"doomed-0")
    old.send(1, b"doomed-1")
    assert lso(broker, 0) == 0 and lso(broker, 1) == 0
    pid, epoch = init(broker, "a")
    assert (pid, epoch) == (old.pid, old.epoch + 2)
    for p in (0, 1):
        assert committed(broker, p) == []
        assert lso(broker, p) == hw(broker, p)  # the abort released the LSO
        # the ABORT marker carries the fencing epoch (+1), so the old instance is fenced there
        assert [(k, pid_, e) for k, pid_, e, _ in markers(broker, p)] == [(ControlType.ABORT, pid, old.epoch + 1)]
    assert describe(broker, "a").state is S.EMPTY
    states = [r.transit.state for r in txn_log_records(broker, "a")]
    assert states == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


#: the last epoch InitProducerId bumps to (is_epoch_exhausted from there on)
LAST = MAX_PRODUCER_EPOCH - 1
#: how many InitProducerIds the near_exhaustion fixture leaves before LAST
BUMPS = 3


@pytest.fixture
def near_exhaustion(data: Path, clock: FakeClock) -> int:
    """Transactional id "a" BUMPS InitProducerIds before its epoch is exhausted, as
    32763 re-initialisations leave it: its record written to the transaction log the
    way the coordinator writes it, then loaded by the next open. Returns its producer id
    (no constant patched: the coordinator runs with Kafka's own limit)."""
    with open_broker(data, clock) as b:
        pid, _ = init(b, "a")
        append_txn_log(b, "a", TxnTransitMetadata(pid, -1, LAST - BUMPS, -1, TIMEOUT, S.EMPTY, frozenset(),
                                                  -1, clock.now_ms()))
    return pid


def test_an_exhausted_epoch_moves_the_id_to_a_new_producer_id(near_exhaustion, broker):
    pid = near_exhaustion
    assert [init(broker, "a") for _ in range(BUMPS)] == [(pid, e) for e in range(LAST - BUMPS + 1, LAST + 1)]
    new_pid, epoch = init(broker, "a")
    assert epoch == 0 and new_pid > pid
    assert init(broker, "a") == (new_pid, 1)
    # the old producer id is done with
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING",
           add, broker, "a", pid, LAST, (T, 0))


def test_a_transaction_open_at_the_last_epoch_is_still_fenced(near_exhaustion, broker):
    """The fence must go past the last usable epoch, or the markers would carry the
    zombie's own epoch and its late batches would open a transaction nobody ends."""
    for _ in range(BUMPS):
        pid, epoch = init(broker, "a")
    assert epoch == LAST
    zombie = Producer(broker, "a", pid, epoch)
    zombie.begin(0)
    zombie.send(0, b"doomed")
    new_pid, new_epoch = init(broker, "a")
    assert (new_pid != pid, new_epoch) == (True, 0)
    assert [e for _, _, e, _ in markers(broker)] == [MAX_PRODUCER_EPOCH]
    end = hw(broker)
    # its producer id now maps to nothing (the id moved on): verification refuses it as such
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", zombie.send, 0, b"late")
    assert lso(broker) == hw(broker) == end and committed(broker) == []


def test_kip360_bump_with_the_current_epoch_bumps_and_a_retry_gets_the_same_answer(broker):
    pid, epoch = init(broker, "a")
    assert init(broker, "a", TIMEOUT, pid, epoch) == (pid, epoch + 1)
    written = txn_log_end(broker, "a")
    assert init(broker, "a", TIMEOUT, pid, epoch) == (pid, epoch + 1)  # the retry
    assert txn_log_end(broker, "a") == written  # ...answered without a second bump
    assert init(broker, "a", TIMEOUT, pid, epoch + 1) == (pid, epoch + 2)


def test_kip360_bump_with_another_producer_id_is_fenced(broker):
    pid, epoch = init(broker, "a")
    other, _ = init(broker, "b")
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", init, broker, "a", TIMEOUT, other, epoch)
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", init, broker, "a", TIMEOUT, pid, epoch + 5)
    assert describe(broker, "a").producer_epoch == epoch


def test_a_fenced_instance_cannot_bump_its_way_back(data, clock):
    """After a new instance's ordinary InitProducerId, the old instance's KIP-360 bump
    with its old epoch is no retry: PRODUCER_FENCED -- also after a restart."""
    with open_broker(data, clock) as b:
        pid, old_epoch = init(b, "a")
        assert init(b, "a") == (pid, old_epoch + 1)  # a new instance
        expect(ProducerFencedError, 90, "PRODUCER_FENCED", init, b, "a", TIMEOUT, pid, old_epoch)
        assert describe(b, "a").producer_epoch == old_epoch + 1
    with open_broker(data, clock) as b:
        expect(ProducerFencedError, 90, "PRODUCER_FENCED", init, b, "a", TIMEOUT, pid, old_epoch)
        assert init(b, "a", TIMEOUT, pid, old_epoch + 1) == (pid, old_epoch + 2)


def test_a_fenced_instance_cannot_follow_the_producer_id_rotation(near_exhaustion, broker):
    pid = near_exhaustion
    for _ in range(BUMPS):
        init(broker, "a")
    new_pid, _ = init(broker, "a")  # an ordinary init rotates the producer id
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", init, broker, "a", TIMEOUT, pid, LAST)
    assert describe(broker, "a").producer_id == new_pid


def test_kip360_bump_at_the_last_epoch_rotates_and_a_retry_gets_the_same_answer(near_exhaustion, broker):
    pid = near_exhaustion
    for _ in range(BUMPS):
        init(broker, "a")
    rotated = init(broker, "a", TIMEOUT, pid, LAST)
    assert rotated[0] != pid and rotated[1] == 0
    assert init(broker, "a", TIMEOUT, pid, LAST) == rotated


def test_producer_id_mapping_is_the_same_before_and_after_a_restart(near_exhaustion, data, clock):
    """A rotated-away producer id maps to nothing, whether the coordinator saw the
    rotation happen or read it from the log; and an expired id leaves nothing that
    a late transactional batch of the old producer id could trip over."""
    with open_broker(data, clock, **{"transactional.id.expiration.ms": 1000}) as b:
        b.create_topic(T, partitions=1)
        pid = near_exhaustion
        for _ in range(BUMPS):
            init(b, "a")
        new_pid, _ = init(b, "a")
        tc = b.engine.transactions.coordinator
        assert (tc.transactional_id_of(pid), tc.transactional_id_of(new_pid)) == (None, "a")
    with open_broker(data, clock, **{"transactional.id.expiration.ms": 1000}) as b:
        tc = b.engine.transactions.coordinator
        assert (tc.transactional_id_of(pid), tc.transactional_id_of(new_pid)) == (None, "a")
        clock.advance(1000)
        assert b.engine.call(b.engine.jobs.expire_transactional_ids) == ["a"]
    with open_broker(data, clock) as b:
        # a stranger's batch now: its producer id maps to nothing, and nothing is appended
        expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", b.produce, T, 0,
               data_batch([b"late"], pid, LAST, 0, transactional=True))
        assert hw(b) == 0 and lso(b) == 0
        assert b.engine.transactions.coordinator.transactional_id_of(pid) is None


# -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------

def test_add_partitions_for_an_unknown_id_is_invalid_producer_id_mapping(broker):
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", add, broker, "nobody", 1, 0, (T, 0))
    assert describe(broker, "nobody") is None


def test_add_partitions_with_another_producer_id_is_invalid_producer_id_mapping(broker):
    pid, epoch = init(broker, "a")
    other, _ = init(broker, "b")
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", add, broker, "a", other, epoch, (T, 0))
    assert describe(broker, "a").state is S.EMPTY


def test_add_partitions_with_an_old_epoch_is_producer_fenced(broker):
    pid, old = init(broker, "a")
    init(broker, "a")
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", add, broker, "a", pid, old, (T, 0))
    assert describe(broker, "a").state is S.EMPTY
    # a newer epoch than the coordinator's is no better
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", add, broker, "a", pid, old + 5, (T, 0))


def test_an_unknown_partition_fails_alone_and_the_others_are_not_attempted(broker):
    pid, epoch = init(broker, "a")
    written = txn_log_end(broker, "a")
    errors = add(broker, "a", pid, epoch, (T, 0), (T, 1), (T, 7), ("nope", 0))
    assert {tp: (e.code, e.name) for tp, e in errors.items()} == {
        (T, 0): (55, "OPERATION_NOT_ATTEMPTED"), (T, 1): (55, "OPERATION_NOT_ATTEMPTED"),
        (T, 7): (3, "UNKNOWN_TOPIC_OR_PARTITION"), ("nope", 0): (3, "UNKNOWN_TOPIC_OR_PARTITION")}
    assert isinstance(errors[(T, 7)], UnknownTopicOrPartitionError)
    assert isinstance(errors[(T, 0)], OperationNotAttemptedError)
    assert describe(broker, "a").state is S.EMPTY and txn_log_end(broker, "a") == written


def test_adding_partitions_starts_the_transaction_and_its_timer(broker, clock):
    pid, epoch = init(broker, "a")
    started = clock.now_ms()
    assert add(broker, "a", pid, epoch, (T, 0)) == {(T, 0): None}
    clock.advance(50)
    assert add(broker, "a", pid, epoch, (T, 1)) == {(T, 1): None}
    meta = describe(broker, "a")
    assert meta.state is S.ONGOING and meta.partitions == {(T, 0), (T, 1)}
    assert meta.txn_start_timestamp == started and meta.txn_last_update_timestamp == started + 50


def test_adding_the_same_partitions_again_writes_nothing(broker):
    pid, epoch = init(broker, "a")
    add(broker, "a", pid, epoch, (T, 0), (T, 1))
    written = txn_log_end(broker, "a")
    assert add(broker, "a", pid, epoch, (T, 1)) == {(T, 1): None}
    assert add(broker, "a", pid, epoch, (T, 0), (T, 1)) == {(T, 0): None, (T, 1): None}
    assert txn_log_end(broker, "a") == written
    add(broker, "a", pid, epoch, (T, 0), ("orders", 1))
    assert txn_log_end(broker, "a") == written
    broker.create_topic("more", partitions=1)
    add(broker, "a", pid, epoch, (T, 0), ("more", 0))
    assert txn_log_end(broker, "a") == written + 1
    assert describe(broker, "a").partitions == {(T, 0), (T, 1), ("more", 0)}


def test_add_partitions_while_the_last_transaction_completes_is_concurrent_transactions(broker):
    p = producer(broker, "a")
    p.begin(0)
    p.send(0, b"x")
    with MarkerGate(broker):
        commit = in_background(broker, "end_txn", "a", p.pid, p.epoch, True)
        wait_for_state(broker, "a", S.PREPARE_COMMIT)
        expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", add, broker, "a", p.pid, p.epoch, (T, 1))
        expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS",
               call, broker, "add_offsets", "a", p.pid, p.epoch, "group")
        assert not commit.done()
    commit.result(5)
    assert describe(broker, "a").state is S.COMPLETE_COMMIT
    assert add(broker, "a", p.pid, p.epoch, (T, 1)) == {(T, 1): None}  # retried: fine now


def java_hash_code(text: str) -> int:
    """Java's String.hashCode, written out again (ASCII ids)."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions``: Utils.abs is Math.abs, with
    Integer.MIN_VALUE mapped to 0."""
    h = java_hash_code(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def test_add_offsets_adds_the_groups_consumer_offsets_partition(broker):
    group = "billing-app"
    assert java_hash_code(group) > 0
    pid, epoch = init(broker, "a")
    tp = call(broker, "add_offsets", "a", pid, epoch, group)
    assert tp == (offsets_log.TOPIC, kafka_partition_for(group, 3))
    meta = describe(broker, "a")
    assert meta.state is S.ONGOING and meta.partitions == {tp}
    # nobody wrote offsets: the topic was never created, and the commit still completes
    end(broker, "a", pid, epoch, True)
    assert describe(broker, "a").state is S.COMPLETE_COMMIT


def test_the_commit_marker_lands_in_the_groups_consumer_offsets_partition(broker):
    async def create_offsets_topic() -> None:
        await broker.engine.topics.ensure_internal_topic(offsets_log.TOPIC)
    broker.engine.call(create_offsets_topic)
    pid, epoch = init(broker, "a")
    _, partition = call(broker, "add_offsets", "a", pid, epoch, "billing-app")
    end(broker, "a", pid, epoch, True)
    assert [(k, p) for k, p, _, _ in markers(broker, partition, offsets_log.TOPIC)] == [(ControlType.COMMIT, pid)]
    for other in {0, 1, 2} - {partition}:
        assert markers(broker, other, offsets_log.TOPIC) == []


def test_add_offsets_checks_the_producer_like_add_partitions(broker):
    pid, epoch = init(broker, "a")
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING",
           call, broker, "add_offsets", "zzz", pid, epoch, "g")
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", call, broker, "add_offsets", "a", pid, epoch + 1, "g")


def test_a_group_with_a_negative_hash_code_goes_where_kafka_puts_it(broker):
    group = "my-group"  # hashCode -1906497762: Kafka partition 0 of 3, masked 2
    assert java_hash_code(group) < 0
    pid, epoch = init(broker, "a")
    assert call(broker, "add_offsets", "a", pid, epoch, group) == (offsets_log.TOPIC, kafka_partition_for(group, 3))


def test_transactional_ids_are_placed_as_kafka_places_them():
    for txn_id in ("my-group", "billing", "txn-a", "producer-7"):
        for partitions in (3, 50):
            assert transaction_log.partition_for(txn_id, partitions) == kafka_partition_for(txn_id, partitions)


# -- EndTxn -----------------------------------------------------------------------------

@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_end_txn_writes_a_marker_to_every_partition_before_it_answers(broker, commit):
    broker.create_topic("other", partitions=1)
    p = producer(broker, "a")
    p.begin(0, 1)
    assert add(broker, "a", p.pid, p.epoch, ("other", 0)) == {("other", 0): None}
    p.send(0, b"a0")
    p.send(1, b"a1")
    p.send(0, b"o0", topic="other")
    end(broker, "a", p.pid, p.epoch, commit)
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    epoch = broker.engine.transactions.coordinator.coordinator_epoch
    for topic, partition, value in ((T, 0, b"a0"), (T, 1, b"a1"), ("other", 0, b"o0")):
        assert markers(broker, partition, topic) == [(kind, p.pid, p.epoch, epoch)]
        assert committed(broker, partition, topic) == ([value] if commit else [])
        assert broker.list_offsets(topic, partition, -1, "read_committed") == hw(broker, partition, topic)
    meta = describe(broker, "a")
    assert meta.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT) and not meta.partitions
    assert [r.transit.state for r in txn_log_records(broker, "a")][-2:] == [
        S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, meta.state]


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_end_txn_retried_after_completion_is_ok_and_the_opposite_is_invalid_txn_state(broker, commit):
    p = producer(broker, "a")
    p.begin(0)
    p.send(0, b"x")
    end(broker, "a", p.pid, p.epoch, commit)
    written = txn_log_end(broker, "a")
    end(broker, "a", p.pid, p.epoch, commit)  # the seed: "return OK"
    expect(InvalidTxnStateError, 48, "INVALID_TXN_STATE", end, broker, "a", p.pid, p.epoch, not commit)
    assert txn_log_end(broker, "a") == written and len(markers(broker)) == 1


def test_end_txn_with_no_transaction_is_invalid_txn_state(broker):
    pid, epoch = init(broker, "a")
    for commit in (True, False):
        expect(InvalidTxnStateError, 48, "INVALID_TXN_STATE", end, broker, "a", pid, epoch, commit)
    assert describe(broker, "a").state is S.EMPTY


def test_end_txn_with_an_old_epoch_is_producer_fenced(broker):
    p = producer(broker, "a")
    p.begin(0)
    pid, epoch = init(broker, "a")  # aborts p's transaction
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", end, broker, "a", p.pid, p.epoch, True)
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", end, broker, "zzz", pid, epoch, True)
    assert describe(broker, "a").state is S.EMPTY


def test_end_txn_while_completing_waits_for_the_same_command_and_refuses_the_opposite(broker):
    p = producer(broker, "a")
    p.begin(0)
    p.send(0, b"x")
    with MarkerGate(broker) as gate:
        first = in_background(broker, "end_txn", "a", p.pid, p.epoch, True)
        wait_for_state(broker, "a", S.PREPARE_COMMIT)
        expect(InvalidTxnStateError, 48, "INVALID_TXN_STATE", end, broker, "a", p.pid, p.epoch, False)
        retry = in_background(broker, "end_txn", "a", p.pid, p.epoch, True)
        time.sleep(0.05)
        assert not first.done() and not retry.done() and gate.held == 1
    first.result(5)
    retry.result(5)
    assert committed(broker) == [b"x"] and len(markers(broker)) == 1


# -- coordinator startup --------------------------------------------------------------

def test_an_inconsistent_log_partition_answers_not_coordinator_and_the_others_work(data, clock):
    by_partition = ids_in_partitions()
    bad, good = by_partition[1][0], by_partition[2][0]
    neighbour = by_partition[1][1]  # same partition as ``bad``
    with open_broker(data, clock) as b:
        b.create_topic(T, partitions=1)
        pid, _ = init(b, bad)
        init(b, neighbour)
        init(b, good)
        init(b, bad)
        latest = describe(b, bad)
        assert latest.producer_epoch == 1
        append_txn_log(b, bad, replace(latest, producer_epoch=0))  # epoch goes back: corrupt
    with open_broker(data, clock) as b:
        for txn_id in (bad, neighbour, by_partition[1][2]):  # known or not: the partition is off
            expect(NotCoordinatorError, 16, "NOT_COORDINATOR", init, b, txn_id)
            expect(NotCoordinatorError, 16, "NOT_COORDINATOR", add, b, txn_id, pid, 1, (T, 0))
            expect(NotCoordinatorError, 16, "NOT_COORDINATOR", end, b, txn_id, pid, 1, True)
            expect(NotCoordinatorError, 16, "NOT_COORDINATOR", call, b, "add_offsets", txn_id, pid, 1, "g")
        gpid, gepoch = describe(b, good).producer_id, describe(b, good).producer_epoch
        assert init(b, good) == (gpid, gepoch + 1)
        other_good = by_partition[0][0]
        assert init(b, other_good)[1] == 0
        # ids of the disabled partition never come back as fresh ids either
        assert min(init(b, None, -1)[0], init(b, other_good)[0]) > pid


def test_the_coordinator_epoch_goes_up_at_every_reopen_and_markers_carry_it(data, clock):
    epochs = []
    for round_ in range(3):
        with open_broker(data, clock) as b:
            if round_ == 0:
                b.create_topic(T, partitions=1)
            epochs.append(b.engine.transactions.coordinator.coordinator_epoch)
            p = producer(b, "a")
            p.begin(0)
            p.send(0, b"r%d" % round_)
            end(b, "a", p.pid, p.epoch, round_ != 1)
    assert epochs[0] < epochs[1] < epochs[2]
    with open_broker(data, clock) as b:
        assert [c for _, _, _, c in markers(b)] == epochs
        assert [k for k, _, _, _ in markers(b)] == [ControlType.COMMIT, ControlType.ABORT, ControlType.COMMIT]
        assert committed(b) == [b"r0", b"r2"]


def test_a_prepared_commit_is_rolled_forward_on_reopen(data, clock):
    with open_broker(data, clock) as b:
        b.create_topic(T, partitions=2)
        p = producer(b, "a")
        p.begin(0, 1)
        p.send(0, b"x0")
        p.send(1, b"x1")
        meta = describe(b, "a")
        # the crash: PREPARE_COMMIT is durable, no marker was written
        clock.advance(5)
        append_txn_log(b, "a", replace(meta, state=S.PREPARE_COMMIT,
                                       txn_last_update_timestamp=clock.now_ms()))
        assert markers(b, 0) == [] and committed(b, 0) == []
    with open_broker(data, clock) as b:
        b.engine.call(b.engine.transactions.coordinator.wait_for_completions)
        meta = wait_for_state(b, "a", S.COMPLETE_COMMIT)
        assert not meta.partitions
        epoch = b.engine.transactions.coordinator.coordinator_epoch
        for partition, value in ((0, b"x0"), (1, b"x1")):
            assert markers(b, partition) == [(ControlType.COMMIT, p.pid, p.epoch, epoch)]
            assert committed(b, partition) == [value] and lso(b, partition) == hw(b, partition)
        end(b, "a", p.pid, p.epoch, True)  # the client's retry: OK


def test_a_prepared_abort_is_rolled_forward_on_reopen(data, clock):
    with open_broker(data, clock) as b:
        b.create_topic(T, partitions=1)
        p = producer(b, "a")
        p.begin(0)
        p.send(0, b"x")
        append_txn_log(b, "a", replace(describe(b, "a"), state=S.PREPARE_ABORT))
    with open_broker(data, clock) as b:
        b.engine.call(b.engine.transactions.coordinator.wait_for_completions)
        wait_for_state(b, "a", S.COMPLETE_ABORT)
        assert [k for k, _, _, _ in markers(b)] == [ControlType.ABORT] and committed(b) == []
        assert lso(b) == hw(b)


# -- scheduled work: transaction timeout and transactional id expiration ---------------

def test_a_timed_out_transaction_is_aborted_with_an_epoch_bump(broker, clock):
    p = producer(broker, "a", timeout=10_000)
    p.begin(0, 1)
    p.send(0, b"slow")
    clock.advance(10_000)
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == []  # not past it yet
    assert describe(broker, "a").state is S.ONGOING
    clock.advance(1)
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == ["a"]
    meta = wait_for_state(broker, "a", S.COMPLETE_ABORT)
    assert (meta.producer_id, meta.producer_epoch) == (p.pid, p.epoch + 1)
    assert [(k, e) for k, _, e, _ in markers(broker, 0)] == [(ControlType.ABORT, p.epoch + 1)]
    assert [(k, e) for k, _, e, _ in markers(broker, 1)] == [(ControlType.ABORT, p.epoch + 1)]
    assert committed(broker) == [] and lso(broker) == hw(broker)
    # the zombie: its produce is refused by the partition, its EndTxn by the coordinator
    expect(InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH", p.send, 0, b"late")
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", end, broker, "a", p.pid, p.epoch, True)
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", add, broker, "a", p.pid, p.epoch, (T, 0))
    expect(ProducerFencedError, 90, "PRODUCER_FENCED", init, broker, "a", TIMEOUT, p.pid, p.epoch)
    assert committed(broker) == [] and lso(broker) == hw(broker)
    assert init(broker, "a") == (p.pid, p.epoch + 2)


def test_the_timeout_job_leaves_completed_and_young_transactions_alone(broker, clock):
    young = producer(broker, "young", timeout=100_000)
    young.begin(0)
    done = producer(broker, "done", timeout=1_000)
    done.begin(1)
    end(broker, "done", done.pid, done.epoch, True)
    clock.advance(50_000)
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == []
    assert describe(broker, "young").state is S.ONGOING
    assert describe(broker, "done").state is S.COMPLETE_COMMIT


def test_an_idle_transactional_id_expires_and_comes_back_with_a_new_producer_id(data, clock):
    with open_broker(data, clock, **{"transactional.id.expiration.ms": 60_000}) as b:
        b.create_topic(T, partitions=1)
        p = producer(b, "a")
        p.begin(0)
        p.send(0, b"x")
        end(b, "a", p.pid, p.epoch, True)
        open_ = producer(b, "open")
        open_.begin(0)
        clock.advance(59_999)
        assert b.engine.call(b.engine.jobs.expire_transactional_ids) == []
        clock.advance(1)
        assert b.engine.call(b.engine.jobs.expire_transactional_ids) == ["a"]  # "open" has a transaction
        assert describe(b, "a") is None and describe(b, "open").state is S.ONGOING
        assert txn_log_records(b, "a")[-1].transit is None  # the tombstone
        expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", add, b, "a", p.pid, p.epoch, (T, 0))
        expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", end, b, "a", p.pid, p.epoch, True)
    with open_broker(data, clock, **{"transactional.id.expiration.ms": 60_000}) as b:
        assert describe(b, "a") is None  # the tombstone is read back
        pid, epoch = init(b, "a")
        assert epoch == 0 and pid != p.pid and pid > open_.pid


# -- KIP-890 partition verification -----------------------------------------------------

def test_a_transactional_batch_to_a_partition_not_in_the_transaction_is_transaction_abortable(broker):
    """Kafka's coordinator answers TRANSACTION_ABORTABLE (KIP-890); the Kafka wire tells
    clients older than the error INVALID_TXN_STATE (tests/test_kafka_transaction_abortable.py)."""
    p = producer(broker, "a")
    expect(TransactionAbortableError, 120, "TRANSACTION_ABORTABLE", p.send, 0, b"no txn at all")
    p.begin(0)
    p.send(0, b"fine")
    expect(TransactionAbortableError, 120, "TRANSACTION_ABORTABLE", p.send, 1, b"not added")
    assert hw(broker, 1) == 0 and hw(broker, 0) == 1
    end(broker, "a", p.pid, p.epoch, True)
    expect(TransactionAbortableError, 120, "TRANSACTION_ABORTABLE", p.send, 0, b"after the end")
    assert hw(broker, 0) == 2  # the batch and its marker, nothing after
    assert committed(broker) == [b"fine"]


def test_a_timeout_abort_whose_log_write_fails_is_finished_by_a_later_run(broker, clock):
    """The fence happens in memory first, so the zombie is refused at once; a failed
    PrepareAbort write leaves PrepareEpochFence, which the next run finishes -- one
    id's failure never stops the others."""
    a, b = producer(broker, "a", timeout=1_000), producer(broker, "b", timeout=1_000)
    a.begin(0)
    a.send(0, b"a")
    b.begin(1)
    b.send(1, b"b")
    # each id's writes to __transaction_state fail as a broken disk fails them
    failing = {txn_id: broker.faults.add(api="Produce", topic=transaction_log.TOPIC, transactional_id=txn_id,
                                         error="KAFKA_STORAGE_ERROR") for txn_id in ("a", "b")}
    clock.advance(1_001)
    broker.engine.call(broker.engine.jobs.abort_timed_out_transactions)
    for txn, partition in ((a, 0), (b, 1)):
        meta = describe(broker, txn.txn_id)
        assert (meta.state, meta.producer_epoch) == (S.PREPARE_EPOCH_FENCE, txn.epoch + 1)
        expect(InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH", txn.send, partition, b"late")
        expect(ProducerFencedError, 90, "PRODUCER_FENCED", end, broker, txn.txn_id, txn.pid, txn.epoch, True)
    expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", init, broker, "a")
    failing["b"].remove()  # "a" keeps failing: "b" must not wait for it
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == ["b"]
    assert wait_for_state(broker, "b", S.COMPLETE_ABORT).producer_epoch == b.epoch + 1
    assert describe(broker, "a").state is S.PREPARE_EPOCH_FENCE
    failing["a"].remove()
    assert broker.engine.call(broker.engine.jobs.abort_timed_out_transactions) == ["a"]
    assert wait_for_state(broker, "a", S.COMPLETE_ABORT).producer_epoch == a.epoch + 1
    assert [e for _, _, e, _ in markers(broker, 0)] == [a.epoch + 1]
    assert committed(broker, 0) == committed(broker, 1) == [] and lso(broker, 0) == hw(broker, 0)
    assert init(broker, "a") == (a.pid, a.epoch + 2)
