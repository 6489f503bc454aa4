"""Transactions version 2 (KIP-890 part 2) on the wire, and the features that announce it.

A raw client speaks exactly what a Kafka 4 client sends: ApiVersions (the finalized
``transaction.version``), InitProducerId, Produce v12 and TxnOffsetCommit v5 with no
AddPartitionsToTxn / AddOffsetsToTxn before them, EndTxn v5 (whose answer carries the
bumped epoch). The late-write scenarios -- a Produce or TxnOffsetCommit of transaction
N arriving after transaction N+1 began -- are refused on both versions, and nothing of
them reaches a read_committed reader or the group's offsets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app import Broker
from exactly.app.kafka.wire import ApiKey
from exactly.coordinator import features, transaction_log
from exactly.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from exactly.storage.clock import FakeClock
from exactly.storage.errors import InvalidProducerIdMappingError, InvalidTxnStateError
from exactly.storage.record_batch import (
    MAX_PRODUCER_EPOCH,
    ControlType,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    encode_batch,
    iter_headers,
)
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.kafka_support import SOFTWARE, KafkaBroker, raw_connection
from tests.raw_producer import RawProducer
from tests.test_transaction_coordinator import append_txn_log, call, init, txn_log_records

S = TransactionState
T = "tv2"
GROUP = "tv2-group"
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_ABORTABLE = 120
PRODUCER_FENCED = 90


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        k.broker.create_topic(T, partitions=2)
        yield k


@pytest.fixture
def kafka_tv1(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **{"transaction.version": 1}) as k:
        k.broker.create_topic(T, partitions=2)
        yield k


def committed_values(kafka: KafkaBroker, partition: int = 0) -> list[bytes]:
    from exactly.storage.read_committed import read_records
    r = kafka.broker.fetch(T, partition, 0, isolation_level="read_committed")
    return [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]


def committed_offset(kafka: KafkaBroker) -> int:
    conn = raw_connection(kafka.port)
    try:
        answer = conn.request(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "require_stable": True,
                                                       "topics": [{"name": T, "partition_indexes": [0]}]})
        return answer.topics[0].partitions[0].committed_offset
    finally:
        conn.sock.close()


def state(kafka: KafkaBroker, txn_id: str) -> Any:
    async def run() -> Any:
        return kafka.engine.transactions.describe_transaction(txn_id)
    return kafka.engine.call(run)


# -- ApiVersions features --------------------------------------------------------------------


def api_versions(kafka: KafkaBroker, version: int) -> Any:
    conn = raw_connection(kafka.port)
    try:
        return conn.request(ApiKey.API_VERSIONS, version, SOFTWARE)
    finally:
        conn.sock.close()


def test_api_versions_v4_reports_the_features_a_kafka_4_node_reports(kafka: KafkaBroker) -> None:
    """Kafka 4.4's single node (tests/kafka's fixture) answers transaction.version 0-2
    finalized 2, group.version 0-1 and metadata.version 7-33 finalized 33."""
    answer = api_versions(kafka, 4)
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features}
    assert supported == {"transaction.version": (0, 2), "group.version": (0, 1), "metadata.version": (7, 33)}
    assert finalized["transaction.version"] == (2, 2) and finalized["metadata.version"] == (33, 33)
    assert finalized.get("group.version", (0, 0)) == (features.GROUP_VERSION_LEVEL,) * 2
    assert answer.finalized_features_epoch >= 0
    # v3 leaves out what starts at 0, as Kafka's does (older clients read 0 as unsupported)
    assert [f.name for f in api_versions(kafka, 3).supported_features] == ["metadata.version"]


def test_transaction_version_is_pinned_by_config(kafka_tv1: KafkaBroker) -> None:
    finalized = {f.name: f.max_version_level for f in api_versions(kafka_tv1, 4).finalized_features}
    assert finalized["transaction.version"] == 1


def test_a_transaction_version_out_of_range_is_refused(tmp_path: Path) -> None:
    from exactly.app.config import BrokerConfig
    from exactly.storage.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError, match="transaction.version must be one of"):
        BrokerConfig.from_kafka({"transaction.version": 3})


# -- the transaction-version-2 flow ----------------------------------------------------------


def test_a_tv2_transaction_needs_no_add_requests_and_endtxn_bumps_the_epoch(kafka: KafkaBroker) -> None:
    with RawProducer(kafka, "tv2-flow", T, GROUP) as p:
        start_epoch = p.epoch
        assert p.produce(0, p.batch(0, b"a", b"b")) == 0  # Produce v12 added the partition
        assert p.produce(1, p.batch(1, b"c")) == 0
        assert state(kafka, "tv2-flow").partitions == {(T, 0), (T, 1)}
        assert state(kafka, "tv2-flow").client_transaction_version == 2
        assert p.commit_offsets(2) == 0  # TxnOffsetCommit v5 added the group
        answer = p.end(commit=True)
        assert (answer.error_code, answer.producer_epoch) == (0, start_epoch + 1)
        assert committed_values(kafka, 0) == [b"a", b"b"] and committed_values(kafka, 1) == [b"c"]
        assert committed_offset(kafka) == 2
        # the markers carry the bumped epoch
        records = kafka.broker.fetch(T, 0, 0).records
        from exactly.storage.record_batch import iter_headers
        marker_epochs = [h.producer_epoch for _, h in iter_headers(records) if h.is_control]
        assert marker_epochs == [start_epoch + 1]
        # the next transaction starts at the new epoch, sequences from 0
        assert p.produce(0, p.batch(0, b"d")) == 0
        assert p.end(commit=False).producer_epoch == start_epoch + 2
        assert committed_values(kafka, 0) == [b"a", b"b"]


def test_a_retried_endtxn_v5_gets_the_same_answer_and_bumps_nothing(kafka: KafkaBroker) -> None:
    with RawProducer(kafka, "tv2-retry", T, GROUP) as p:
        old_pid, old_epoch = p.pid, p.epoch
        p.produce(0, p.batch(0, b"x"))
        first = p.end(commit=True)
        again = p.conn.request(ApiKey.END_TXN, 5, {"transactional_id": "tv2-retry", "producer_id": old_pid,
                                                   "producer_epoch": old_epoch, "committed": True})
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id,
                                                                               first.producer_epoch)
        # an abort named with the old epoch is no retry of that commit
        wrong = p.conn.request(ApiKey.END_TXN, 5, {"transactional_id": "tv2-retry", "producer_id": old_pid,
                                                   "producer_epoch": old_epoch, "committed": False})
        assert wrong.error_code == INVALID_TXN_STATE
        assert state(kafka, "tv2-retry").producer_epoch == old_epoch + 1


def test_a_tv2_abort_with_nothing_added_still_bumps_the_epoch(kafka: KafkaBroker) -> None:
    """A Kafka 4 client cannot know whether its Produce added a partition; its abort
    must fence that Produce anyway."""
    with RawProducer(kafka, "tv2-empty-abort", T, GROUP) as p:
        epoch = p.epoch
        late = p.batch(0, b"in flight")
        answer = p.end(commit=False)
        assert (answer.error_code, answer.producer_epoch) == (0, epoch + 1)
        assert state(kafka, "tv2-empty-abort").state is S.COMPLETE_ABORT
        assert p.produce(0, late) == INVALID_PRODUCER_EPOCH  # the write that was in flight
        assert kafka.broker.list_offsets(T, 0, -1) == 0


def test_clients_of_version_0_and_1_are_served_unchanged(kafka: KafkaBroker) -> None:
    """Produce v9, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit v3, EndTxn v3: no
    implicit add, no epoch bump, on a broker that finalizes version 2."""
    with RawProducer(kafka, "tv1-client", T, GROUP, produce_version=9, end_version=3) as p:
        epoch = p.epoch
        assert p.produce(0, p.batch(0, b"unadded")) == INVALID_TXN_STATE  # verified, not added
        p.sequences.clear()
        p.add_partitions(0)
        assert p.produce(0, p.batch(0, b"a")) == 0
        p.add_offsets()
        assert p.commit_offsets(1, version=3) == 0
        assert p.end(commit=True).error_code == 0
        assert state(kafka, "tv1-client").producer_epoch == epoch
        assert state(kafka, "tv1-client").client_transaction_version == 0
        assert committed_values(kafka) == [b"a"] and committed_offset(kafka) == 1


def test_with_transaction_version_1_finalized_produce_v12_is_only_verified(kafka_tv1: KafkaBroker) -> None:
    """Verified, not added: TRANSACTION_ABORTABLE, which Produce v11+ and TxnOffsetCommit
    v4+ know (KIP-890)."""
    with RawProducer(kafka_tv1, "tv1-cluster", T, GROUP) as p:
        assert p.produce(0, p.batch(0, b"x")) == TRANSACTION_ABORTABLE
        assert p.commit_offsets(1) == TRANSACTION_ABORTABLE
        assert kafka_tv1.broker.list_offsets(T, 0, -1) == 0


# -- late writes of transaction N after N+1 began ---------------------------------------------


def test_tv2_a_late_produce_and_offset_commit_of_the_previous_transaction_are_refused(kafka: KafkaBroker) -> None:
    with RawProducer(kafka, "tv2-late", T, GROUP) as p:
        old_epoch = p.epoch
        p.produce(0, p.batch(0, b"n"))
        late_batch = encode_batch([SimpleRecord(b"late")], producer_id=p.pid, producer_epoch=old_epoch,
                                  base_sequence=1, transactional=True)
        p.end(commit=True)  # transaction N
        p.produce(0, p.batch(0, b"n+1"))  # transaction N+1 began, partition 0 in it
        assert p.produce(0, late_batch) == INVALID_PRODUCER_EPOCH
        assert p.produce(1, late_batch) == INVALID_PRODUCER_EPOCH  # a partition N+1 does not have
        assert p.commit_offsets(99, epoch=old_epoch) == INVALID_PRODUCER_EPOCH
        p.end(commit=True)
        assert committed_values(kafka, 0) == [b"n", b"n+1"] and committed_values(kafka, 1) == []
        assert committed_offset(kafka) == -1


def test_tv1_a_late_produce_and_offset_commit_of_the_previous_transaction_are_refused(kafka: KafkaBroker) -> None:
    """Version 0/1: the client's abort bumps the epoch through InitProducerId (KIP-360),
    as Kafka's producer does after a request timed out, so N's late writes carry an
    epoch that is not N+1's."""
    with RawProducer(kafka, "tv1-late", T, GROUP, produce_version=9, end_version=3) as p:
        old_epoch = p.epoch
        p.add_partitions(0)
        late_batch = p.batch(0, b"late")  # sent, timed out at the client, still on its way
        assert p.end(commit=False).error_code == 0
        bumped = p.conn.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "tv1-late", "transaction_timeout": 60_000, "producer_id": p.pid,
            "producer_epoch": old_epoch})
        assert (bumped.error_code, bumped.producer_epoch) == (0, old_epoch + 1)
        p.epoch = bumped.producer_epoch
        p.sequences.clear()
        p.add_partitions(0, 1)
        p.add_offsets()
        assert p.produce(0, p.batch(0, b"n+1")) == 0
        assert p.produce(0, late_batch) == INVALID_PRODUCER_EPOCH
        assert p.commit_offsets(99, version=3, epoch=old_epoch) == INVALID_PRODUCER_EPOCH
        assert p.end(commit=True).error_code == 0
        assert committed_values(kafka, 0) == [b"n+1"] and committed_offset(kafka) == -1


def test_pipelined_tv2_batches_to_new_partitions_are_appended_in_order(kafka: KafkaBroker) -> None:
    """Five batches to two partitions, sent before any answer: the first of each
    partition adds it, the others wait behind it, and every sequence lands in order."""
    with RawProducer(kafka, "tv2-pipeline", T, GROUP) as p:
        batches = [(i % 2, p.batch(i % 2, b"v%d" % i)) for i in range(6)]
        for partition, batch in batches:
            p.conn.send(ApiKey.PRODUCE, 12, {
                "transactional_id": p.txn_id, "acks": -1, "timeout": 10_000,
                "topic_data": [{"name": T, "partition_data": [{"index": partition, "records": batch}]}]})
        codes = [p.conn.receive(ApiKey.PRODUCE, 12)[1].responses[0].partition_responses[0].error_code
                 for _ in batches]
        assert codes == [0] * 6
        p.end(commit=True)
        assert committed_values(kafka, 0) == [b"v0", b"v2", b"v4"]
        assert committed_values(kafka, 1) == [b"v1", b"v3", b"v5"]


def test_pipelined_batches_of_a_fenced_producer_are_all_refused_and_none_appended(kafka: KafkaBroker) -> None:
    """A new instance fenced the producer: its batches, pipelined behind the one whose
    implicit add is refused, are refused too, and nothing reaches the log."""
    with RawProducer(kafka, "tv2-fenced", T, GROUP) as p:
        batches = [p.batch(0, b"z%d" % i) for i in range(3)]
        newcomer = RawProducer(kafka, "tv2-fenced", T, GROUP)  # InitProducerId: the epoch moves on
        newcomer.close()
        for batch in batches:
            p.conn.send(ApiKey.PRODUCE, 12, {
                "transactional_id": p.txn_id, "acks": -1, "timeout": 10_000,
                "topic_data": [{"name": T, "partition_data": [{"index": 0, "records": batch}]}]})
        codes = [p.conn.receive(ApiKey.PRODUCE, 12)[1].responses[0].partition_responses[0].error_code
                 for _ in batches]
        assert codes == [INVALID_PRODUCER_EPOCH] * 3
        assert kafka.broker.list_offsets(T, 0, -1) == 0
        assert state(kafka, "tv2-fenced").state is S.EMPTY


def test_markers_of_a_tv2_commit_are_control_batches_of_the_bumped_epoch(kafka: KafkaBroker) -> None:
    with RawProducer(kafka, "tv2-markers", T, GROUP) as p:
        epoch = p.epoch
        p.produce(1, p.batch(1, b"x"))
        p.end(commit=True)
        records = kafka.broker.fetch(T, 1, 0).records
        controls = [(decode_control_record(decode_batch(records[pos:pos + h.size]).records[0])[0], h.producer_epoch)
                    for pos, h in iter_headers(records) if h.is_control]
        assert controls == [(ControlType.COMMIT, epoch + 1)]


# -- the coordinator: exhaustion, the log's fields, a restart ----------------------------------


LAST = MAX_PRODUCER_EPOCH - 1
TV2 = features.TRANSACTION_VERSION_2


def add_implicitly(broker: Broker, pid: int, epoch: int, partition: int, txn_id: str) -> None:
    call(broker, "add_partition_implicitly", pid, epoch, T, partition, txn_id)


def end_v2(broker: Broker, txn_id: str, pid: int, epoch: int, commit: bool) -> tuple[int, int]:
    return call(broker, "end_txn", txn_id, pid, epoch, commit, TV2)


@pytest.fixture
def coordinator_broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(tmp_path / "data", clock=FakeClock(), **SMALL_INTERNAL_TOPICS) as b:
        b.create_topic(T, partitions=2)
        yield b


def test_an_exhausted_epoch_moves_to_the_next_producer_id_recorded_in_the_log(tmp_path: Path) -> None:
    """EndTxn v5 at the last usable epoch: the markers carry MAX, the log's PrepareCommit
    names NextProducerId, the client gets it at epoch 0; CompleteCommit keeps the old id
    as PreviousProducerId, so a retry with the old id and epoch is still recognised --
    also after a restart."""
    data, clock = tmp_path / "data", FakeClock()
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as b:
        b.create_topic(T, partitions=1)
        pid, _ = init(b, "x")
        append_txn_log(b, "x", TxnTransitMetadata(pid, -1, LAST - 1, -1, 60_000, S.EMPTY, frozenset(), -1,
                                                  clock.now_ms()))
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as b:
        assert init(b, "x") == (pid, LAST)
        add_implicitly(b, pid, LAST, 0, "x")
        new_pid, new_epoch = end_v2(b, "x", pid, LAST, True)
        assert new_pid != pid and new_epoch == 0
        prepare, complete = [r.transit for r in txn_log_records(b, "x")][-2:]
        assert (prepare.state, prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == (
            S.PREPARE_COMMIT, pid, MAX_PRODUCER_EPOCH, new_pid)
        assert prepare.client_transaction_version == TV2
        assert (complete.state, complete.producer_id, complete.producer_epoch, complete.last_producer_id) == (
            S.COMPLETE_COMMIT, new_pid, 0, pid)
        assert end_v2(b, "x", pid, LAST, True) == (new_pid, 0)  # a retry
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as b:
        assert end_v2(b, "x", pid, LAST, True) == (new_pid, 0)  # a retry after a restart
        with pytest.raises(InvalidProducerIdMappingError):  # the old id at any other epoch: Kafka's answer
            end_v2(b, "x", pid, LAST - 1, True)
        add_implicitly(b, new_pid, 0, 0, "x")
        assert end_v2(b, "x", new_pid, 0, True) == (new_pid, 1)


def test_the_log_keeps_the_client_transaction_version_and_a_v0_client_writes_v0(
        coordinator_broker: Broker) -> None:
    b = coordinator_broker
    pid, epoch = init(b, "v2")
    add_implicitly(b, pid, epoch, 0, "v2")
    end_v2(b, "v2", pid, epoch, True)
    records = [r.transit for r in txn_log_records(b, "v2")]
    assert [(t.state, t.client_transaction_version) for t in records] == [
        (S.EMPTY, 0), (S.ONGOING, TV2), (S.PREPARE_COMMIT, TV2), (S.COMPLETE_COMMIT, TV2)]
    pid0, epoch0 = init(b, "v0")
    call(b, "add_partitions", "v0", pid0, epoch0, [(T, 0)])
    call(b, "end_txn", "v0", pid0, epoch0, True)
    partition = transaction_log.partition_for("v0", 3)
    raw = b.fetch(transaction_log.TOPIC, partition, 0).records
    from exactly.storage.record_batch import decode_batch, iter_headers
    versions = [int.from_bytes(rec.value[:2], "big") for pos, h in iter_headers(raw)
                for rec in decode_batch(raw[pos:pos + h.size]).records
                if transaction_log.decode(rec.key, rec.value).transactional_id == "v0"]
    assert versions == [0, 0, 0, 0]  # byte for byte what a version 0/1 client always got


def test_a_commit_in_progress_at_a_crash_completes_with_the_bumped_epoch(tmp_path: Path) -> None:
    """The PrepareCommit (bumped epoch, version 2) is in the log, nothing after it: the
    next start writes the markers with that epoch and the client's retry is answered."""
    data, clock = tmp_path / "data", FakeClock()
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as b:
        b.create_topic(T, partitions=1)
        pid, epoch = init(b, "crash")
        add_implicitly(b, pid, epoch, 0, "crash")
        meta = b.engine.transactions.coordinator.txns["crash"]
        prepare = meta.prepare_abort_or_commit(True, clock.now_ms(), transaction_version=TV2)
        meta.abort_transition()
        append_txn_log(b, "crash", prepare)  # the decision, and then the crash
    with Broker(data, clock=clock, **SMALL_INTERNAL_TOPICS) as b:
        assert end_v2(b, "crash", pid, epoch, True) == (pid, epoch + 1)
        from tests.test_transaction_coordinator import markers
        assert [(kind, e) for kind, _, e, _ in markers(b, 0, T)] == [(ControlType.COMMIT, epoch + 1)]
        with pytest.raises(InvalidTxnStateError):
            end_v2(b, "crash", pid, epoch + 1, True)  # nothing open at the new epoch


# -- the embedded producer ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 1])
def test_the_embedded_producer_uses_the_finalized_transaction_version(tmp_path: Path, version: int) -> None:
    with Broker(tmp_path / "data", clock=FakeClock(), **SMALL_INTERNAL_TOPICS,
                **{"transaction.version": version}) as b:
        b.create_topic(T, partitions=2)
        p = b.producer(transactional_id="embedded")
        p.init_transactions()
        epoch = p.producer_epoch
        for i in range(3):
            p.begin_transaction()
            p.send(T, b"v%d" % i, partition=i % 2)
            p.send_offsets_to_transaction({(T, 0): i + 1}, "embedded-group")
            p.commit_transaction()
        p.begin_transaction()
        p.send(T, b"aborted", partition=0)
        p.abort_transaction()
        p.close()
        meta = call(b, "describe", "embedded")
        if version == 2:
            assert (p.producer_epoch, meta.client_transaction_version) == (epoch + 4, TV2)
        else:
            assert (p.producer_epoch, meta.client_transaction_version) == (epoch, 0)
        from exactly.storage.read_committed import read_records
        values = []
        for partition in (0, 1):
            r = b.fetch(T, partition, 0, isolation_level="read_committed")
            values += [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]
        assert sorted(values) == [b"v0", b"v1", b"v2"]


# -- the SQLite mirror and the console -------------------------------------------------------


def test_the_mirror_shows_which_transaction_version_each_transaction_used(coordinator_broker: Broker) -> None:
    import sqlite3
    b = coordinator_broker
    pid, epoch = init(b, "mirror-v2")
    add_implicitly(b, pid, epoch, 0, "mirror-v2")
    end_v2(b, "mirror-v2", pid, epoch, True)
    pid0, epoch0 = init(b, "mirror-v0")
    call(b, "add_partitions", "mirror-v0", pid0, epoch0, [(T, 1)])
    call(b, "end_txn", "mirror-v0", pid0, epoch0, False)
    b.mirror.catch_up()
    with sqlite3.connect(b.mirror.path) as db:
        finished = dict(db.execute("SELECT transactional_id, transaction_version FROM transactions"))
        current = dict(db.execute("SELECT transactional_id, transaction_version FROM transactional_ids"))
    assert finished == {"mirror-v2": 2, "mirror-v0": 0}
    assert current == {"mirror-v2": 2, "mirror-v0": 0}


def test_the_console_shows_the_transaction_version(coordinator_broker: Broker) -> None:
    import re

    from exactly.app.http import create_app
    b = coordinator_broker
    pid, epoch = init(b, "console-v2")
    add_implicitly(b, pid, epoch, 0, "console-v2")
    end_v2(b, "console-v2", pid, epoch, True)
    pid0, epoch0 = init(b, "console-v0")
    call(b, "add_partitions", "console-v0", pid0, epoch0, [(T, 1)])
    b.mirror.catch_up()
    client = create_app(b.engine, test_config={"TESTING": True}).test_client()
    listing = client.get("/transactions").get_data(as_text=True)
    rows = dict(re.findall(r'data-txn="([^"]+)".*?data-transaction-version="(\d)"', listing, re.S))
    assert rows == {"console-v0": "0", "console-v2": "2"}
    detail = client.get("/transactions/console-v2").get_data(as_text=True)
    assert 'data-transaction-version="2"' in detail
