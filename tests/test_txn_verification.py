"""Transaction verification with no way around it (KIP-890 part 1), and the way out
of every stuck LSO (KIP-664).

* A transactional batch is appended only when its producer id and epoch are those
  of an Ongoing transaction that has its partition; otherwise the Kafka error, and
  the log is untouched (log end offset, bytes on disk) and no LSO is pinned.
* TxnOffsetCommit is accepted only when AddOffsetsToTxn put the group's
  ``__consumer_offsets`` partition in the producer's transaction.
* A COMMIT a partition refuses is never reported as committed.
* The partition-level abort frees the LSO from any producer holding it, and that
  producer cannot carry on -- through the API and the console alike.

Everything is driven with raw batches and raw coordinator calls, as a Kafka client
drives them; states that verification no longer lets a client create (a batch
written before verification existed) are written to the storage layer first,
with the broker closed, and the broker is opened on that directory.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import exactly.coordinator.transaction_coordinator as tc_module
from exactly.app import Broker
from exactly.app.http import create_app
from exactly.app.kafka.api import ApiKey
from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.coordinator.transaction_state import TransactionState
from exactly.storage import filenames
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
)
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import (
    ControlType,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    encode_batch,
    iter_headers,
)
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS, data_batch
from tests.kafka_support import KafkaBroker, raw_connection
from tests.raw_txn import RawTxn, coordinator_call
from tests.storage_log import DurableLogs
from tests.waiting import eventually

S = TransactionState
T = "orders"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def open_broker(data: Path, clock: FakeClock, **config: Any) -> Broker:
    """Frozen: the tests run the jobs they need by hand and move the clock past timeouts."""
    return Broker(data, clock=clock, **{**SMALL_INTERNAL_TOPICS, **FROZEN, **config})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def broker(data: Path, clock: FakeClock) -> Iterator[Broker]:
    with open_broker(data, clock, **{"transactional.id.expiration.ms": 3_600_000}) as b:
        b.create_topic(T, partitions=2)
        yield b


# -- what a consumer and the disk see -------------------------------------------------------


def on_loop(broker: Broker, fn: Callable[[], Any]) -> Any:
    async def run() -> Any:
        return fn()
    return broker.engine.call(run)


def footprint(broker: Broker, topic: str = T, partition: int = 0) -> tuple[int, int]:
    """The log end offset and the bytes of the partition's segment files on disk."""
    log = broker.engine.partitions.log(topic, partition)
    end = on_loop(broker, lambda: log.log_end_offset)
    return end, sum(p.stat().st_size for p in log.directory.iterdir()
                    if p.name.endswith(filenames.LOG_SUFFIX))


def lso_and_hw(broker: Broker, topic: str = T, partition: int = 0) -> tuple[int, int]:
    return (broker.list_offsets(topic, partition, -1, "read_committed"),
            broker.list_offsets(topic, partition, -1, "read_uncommitted"))


def assert_not_pinned(broker: Broker, partition: int = 0) -> None:
    lso, hw = lso_and_hw(broker, T, partition)
    assert lso == hw, f"the LSO of {T}-{partition} is pinned at {lso} (high watermark {hw})"


def committed(broker: Broker, partition: int = 0) -> list[bytes]:
    r = broker.fetch(T, partition, 0, isolation_level="read_committed")
    return [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]


def markers(broker: Broker, partition: int = 0) -> list[tuple[ControlType, int, int]]:
    """(type, producer id, producer epoch) of every marker."""
    r = broker.fetch(T, partition, 0)
    found = []
    for pos, header in iter_headers(r.records):
        if header.is_control:
            kind, _ = decode_control_record(decode_batch(r.records[pos:pos + header.size]).records[0])
            found.append((kind, header.producer_id, header.producer_epoch))
    return found


def expect(error: type[KafkaError], code: int, name: str, fn: Callable[..., Any], *args: Any,
           **kwargs: Any) -> KafkaError:
    with pytest.raises(error) as raised:
        fn(*args, **kwargs)
    assert (raised.value.code, raised.value.name) == (code, name)
    return raised.value


def describe(broker: Broker, txn_id: str):
    return on_loop(broker, lambda: broker.engine.transactions.coordinator.describe(txn_id))


# -- KIP-890: a transactional batch needs its producer's Ongoing transaction --------------------


def stray_epoch_ahead(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    txn = RawTxn(broker, "a")
    txn.add((T, 0))
    return data_batch([b"stray"], txn.pid, txn.epoch + 1, 0, transactional=True), txn


def stray_epoch_behind(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    old = RawTxn(broker, "a")
    txn = RawTxn(broker, "a")  # the next instance: the old one is fenced
    txn.add((T, 0))
    return data_batch([b"stray"], old.pid, old.epoch, 0, transactional=True), txn


def stray_unknown_producer(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    return data_batch([b"stray"], 424_242, 0, 0, transactional=True), None


def stray_expired_id(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    txn = RawTxn(broker, "a")
    txn.send(T, 0, b"committed")
    txn.commit()
    clock.advance(3_600_000)
    assert broker.engine.call(broker.engine.jobs.expire_transactional_ids) == ["a"]
    return data_batch([b"stray"], txn.pid, txn.epoch, 1, transactional=True), None


def stray_partition_not_added(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    txn = RawTxn(broker, "a")
    txn.add((T, 1))
    return data_batch([b"stray"], txn.pid, txn.epoch, 0, transactional=True), txn


def stray_no_transaction(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    txn = RawTxn(broker, "a")  # Empty: nothing added yet
    return data_batch([b"stray"], txn.pid, txn.epoch, 0, transactional=True), None


def stray_after_commit(broker: Broker, clock: FakeClock) -> tuple[bytes, RawTxn | None]:
    txn = RawTxn(broker, "a")
    txn.send(T, 0, b"committed")
    txn.commit()
    return data_batch([b"stray"], txn.pid, txn.epoch, 1, transactional=True), None


#: how Kafka's verification answers each (TransactionCoordinator.handleVerifyPartitionsInTransaction,
#: translated for Produce by AddPartitionsToTxnManager and ReplicaManager)
STRAYS = {
    "epoch ahead of the coordinator's": (stray_epoch_ahead, InvalidProducerEpochError, 47,
                                         "INVALID_PRODUCER_EPOCH"),
    "epoch behind (fenced)": (stray_epoch_behind, InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH"),
    "producer id never seen": (stray_unknown_producer, InvalidProducerIdMappingError, 49,
                               "INVALID_PRODUCER_ID_MAPPING"),
    "transactional id expired": (stray_expired_id, InvalidProducerIdMappingError, 49,
                                 "INVALID_PRODUCER_ID_MAPPING"),
    "partition not added": (stray_partition_not_added, TransactionAbortableError, 120, "TRANSACTION_ABORTABLE"),
    "no transaction open": (stray_no_transaction, TransactionAbortableError, 120, "TRANSACTION_ABORTABLE"),
    "transaction already committed": (stray_after_commit, TransactionAbortableError, 120,
                                      "TRANSACTION_ABORTABLE"),
}


@pytest.mark.parametrize("case", list(STRAYS))
def test_a_stray_transactional_batch_is_refused_and_the_log_is_untouched(broker, clock, case):
    setup, error, code, name = STRAYS[case]
    batch, live = setup(broker, clock)
    before = footprint(broker)
    expect(error, code, name, broker.produce, T, 0, batch)
    assert footprint(broker) == before, "nothing was appended"
    assert_not_pinned(broker)
    if live is not None:  # the producer's own transaction is unharmed
        live.send(T, 0, b"mine")
        live.commit()
        assert committed(broker)[-1:] == [b"mine"]
        assert_not_pinned(broker)


@pytest.mark.parametrize("case", list(STRAYS))
def test_whatever_the_answer_a_commit_that_returns_makes_everything_accepted_visible(broker, clock, case):
    """Today's bug, as a user meets it: an epoch+1 batch was appended, the COMMIT marker
    refused, the commit answered OK -- and the data never became visible while the
    LSO stayed pinned for ever (an expired id's batch opened a transaction nobody
    could end)."""
    setup, *_ = STRAYS[case]
    batch, live = setup(broker, clock)
    try:
        broker.produce(T, 0, batch)
    except KafkaError:
        pass
    if live is not None:
        live.send(T, 0, b"mine")
        live.commit()
    assert_not_pinned(broker)
    assert b"stray" not in committed(broker)


def test_the_transactional_id_of_the_request_must_own_the_producer_id(broker):
    a, b = RawTxn(broker, "a"), RawTxn(broker, "b")
    a.add((T, 0))
    batch = data_batch([b"x"], a.pid, a.epoch, 0, transactional=True)
    before = footprint(broker)
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING",
           broker.produce, T, 0, batch, transactional_id="b")
    expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING",
           broker.produce, T, 0, batch, transactional_id="nobody")
    assert footprint(broker) == before
    assert broker.produce(T, 0, batch, transactional_id="a") == 0
    assert b.pid != a.pid


def test_a_batch_while_the_transaction_completes_is_concurrent_transactions(broker):
    """PrepareCommit: the markers are going out; a late batch must not slip in (Kafka
    answers CONCURRENT_TRANSACTIONS, retriable)."""
    txn = RawTxn(broker, "a")
    txn.send(T, 0, b"in")
    held = broker.faults.add(api="WriteTxnMarkers", action="no-answer")  # the markers wait until it is removed
    ending = broker.engine.schedule(broker.engine.transactions.coordinator.end_txn, "a", txn.pid, txn.epoch, True)
    try:
        eventually(lambda: describe(broker, "a").state is S.PREPARE_COMMIT, 5, "PrepareCommit")
        before = footprint(broker)
        expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", broker.produce, T, 0,
               txn.batch(T, 0, [SimpleRecord(b"late")]))
        assert footprint(broker) == before
    finally:
        held.remove()
    ending.result(10)
    assert committed(broker) == [b"in"]
    assert_not_pinned(broker)


# -- TxnOffsetCommit needs AddOffsetsToTxn ---------------------------------------------------


def offsets_log_end(broker: Broker, group: str) -> int:
    partition = broker.engine.groups.coordinator.partition_of(group)
    if (offsets_log.TOPIC, partition) not in dict(broker.engine.partitions.logs()):
        return 0
    return broker.list_offsets(offsets_log.TOPIC, partition, -1)


def txn_commit_offsets(broker: Broker, txn_id: str, group: str, pid: int, epoch: int) -> Any:
    return broker.engine.call(broker.engine.groups.coordinator.txn_commit_offsets, txn_id, group, pid, epoch,
                              {(T, 0): CommittedOffset(7, "", -1, 0)})


def fetch_stable(broker: Broker, group: str) -> Any:
    return broker.engine.call(broker.engine.groups.coordinator.fetch_offsets, group, [(T, 0)], True)[(T, 0)]


STRAY_OFFSET_COMMITS = {
    # (transactional id, producer id, epoch) of the request, given a producer "a" with
    # an Ongoing transaction on orders-0 (no AddOffsetsToTxn) -> Kafka's answer
    "producer id never seen": (lambda a: ("nobody", 424_242, 0), InvalidProducerIdMappingError, 49,
                               "INVALID_PRODUCER_ID_MAPPING"),
    "another id's producer": (lambda a: ("b", a.pid, a.epoch), InvalidProducerIdMappingError, 49,
                              "INVALID_PRODUCER_ID_MAPPING"),
    "epoch ahead": (lambda a: ("a", a.pid, a.epoch + 1), InvalidProducerEpochError, 47,
                    "INVALID_PRODUCER_EPOCH"),
    "group not added": (lambda a: ("a", a.pid, a.epoch), TransactionAbortableError, 120, "TRANSACTION_ABORTABLE"),
}


@pytest.mark.parametrize("case", list(STRAY_OFFSET_COMMITS))
def test_a_txn_offset_commit_without_add_offsets_is_refused_and_pins_nothing(broker, case):
    """Today's bug: a stray TxnOffsetCommit stayed pending for ever, and every
    require_stable fetch of the group answered UNSTABLE_OFFSET_COMMIT."""
    request, error, code, name = STRAY_OFFSET_COMMITS[case]
    a = RawTxn(broker, "a")
    RawTxn(broker, "b")
    a.send(T, 0, b"in the transaction")
    before = offsets_log_end(broker, "g")
    txn_id, pid, epoch = request(a)
    expect(error, code, name, txn_commit_offsets, broker, txn_id, "g", pid, epoch)
    assert offsets_log_end(broker, "g") == before, "nothing was written"
    assert fetch_stable(broker, "g").error is None
    assert broker.engine.groups.coordinator.describe("g") is None, "no group was made up"
    a.commit()
    assert fetch_stable(broker, "g").error is None


def test_a_txn_offset_commit_after_add_offsets_is_pending_until_the_marker(broker):
    a = RawTxn(broker, "a")
    coordinator_call(broker, "add_offsets", "a", a.pid, a.epoch, "g")
    assert txn_commit_offsets(broker, "a", "g", a.pid, a.epoch) == {(T, 0): None}
    assert fetch_stable(broker, "g").error.name == "UNSTABLE_OFFSET_COMMIT"
    coordinator_call(broker, "end_txn", "a", a.pid, a.epoch, True)
    fetched = fetch_stable(broker, "g")
    assert (fetched.error, fetched.offset) == (None, 7)


# -- a COMMIT a partition refuses is never reported committed ----------------------------------


@pytest.fixture
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests waiting for a completion give up after 0.3 s instead of 30 s."""
    monkeypatch.setattr(tc_module, "COMPLETION_WAIT_S", 0.3)


def with_refusing_partition(data: Path, clock: FakeClock) -> tuple[Broker, RawTxn]:
    """An Ongoing transaction of "a" on orders-0 whose partition has, besides its
    batch, a batch of the same producer one epoch up -- as a broker without
    verification accepted it -- so that partition refuses the transaction's marker.
    Written to the storage layer with the broker closed; the broker reopened."""
    with open_broker(data, clock) as first:
        first.create_topic(T, partitions=2)
        txn = RawTxn(first, "a")
        txn.send(T, 0, b"mine")
    with DurableLogs(data, clock=clock) as logs:
        logs.produce(T, 0, data_batch([b"stray"], txn.pid, txn.epoch + 1, 0, transactional=True))
    broker = open_broker(data, clock)
    txn.broker = broker
    return broker, txn


def close_within(broker: Broker, timeout_s: float = 20) -> None:
    closing = threading.Thread(target=broker.close)
    closing.start()
    closing.join(timeout_s)
    assert not closing.is_alive(), "closing the broker hangs on a transaction that cannot complete"


def test_a_commit_whose_marker_a_partition_refuses_is_never_reported_committed(data, clock, short_waits,
                                                                               caplog):
    broker, txn = with_refusing_partition(data, clock)
    try:
        with caplog.at_level(logging.ERROR, logger=tc_module.__name__):
            expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", coordinator_call,
                   broker, "end_txn", "a", txn.pid, txn.epoch, True)
            assert ConcurrentTransactionsError.retriable
            # a retry is never answered OK either
            expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", coordinator_call,
                   broker, "end_txn", "a", txn.pid, txn.epoch, True)
        assert describe(broker, "a").state is S.PREPARE_COMMIT, "not Complete: a marker is missing"
        assert any("refuses the COMMIT marker" in r.getMessage() for r in caplog.records)
        assert ControlType.COMMIT not in [kind for kind, _, _ in markers(broker)]
        assert committed(broker) == []
        # InitProducerId waits for it too, and says so instead of bumping over it
        expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", coordinator_call,
               broker, "init_producer_id", "a", 60_000)
    finally:
        close_within(broker)
    reopened = open_broker(data, clock)  # rolled forward again: still refused, still not committed
    try:
        expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", coordinator_call,
               reopened, "end_txn", "a", txn.pid, txn.epoch, True)
        assert describe(reopened, "a").state is S.PREPARE_COMMIT
    finally:
        close_within(reopened)


# -- KIP-664: every stuck LSO can be freed, and its producer is fenced --------------------------


class Stuck:
    """A producer holding orders-0's LSO, a record after it, and how the abort must go."""

    def __init__(self, broker: Broker, producer_id: int, epoch: int, transactional_id: str | None,
                 fenced: Callable[[], None]) -> None:
        self.broker, self.producer_id, self.epoch = broker, producer_id, epoch
        #: who the abort names: the id whose transaction the coordinator aborts, or None
        self.transactional_id = transactional_id
        #: the producer's next moves, each of which must now fail
        self.fenced = fenced


def stuck_in_its_transaction(data: Path, clock: FakeClock) -> Stuck:
    broker = open_broker(data, clock)
    broker.create_topic(T, partitions=2)
    txn = RawTxn(broker, "a")
    txn.send(T, 0, b"stuck")
    txn.send(T, 1, b"elsewhere")
    broker.produce(T, 0, data_batch([b"after"]))

    def fenced() -> None:
        expect(InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH", txn.send, T, 0, b"late")
        expect(ProducerFencedError, 90, "PRODUCER_FENCED", coordinator_call, broker, "end_txn", "a",
               txn.pid, txn.epoch, True)
        assert describe(broker, "a").state is S.COMPLETE_ABORT
        assert_not_pinned(broker, 1)  # the whole transaction was aborted, not one partition
    return Stuck(broker, txn.pid, txn.epoch, "a", fenced)


def stuck_hanging(data: Path, clock: FakeClock) -> Stuck:
    """A producer no coordinator knows: its log came from elsewhere (or from before verification)."""
    with DurableLogs(data, clock=clock) as logs:
        logs.create_topic(T, 2)
        logs.produce(T, 0, data_batch([b"stuck"], 424_242, 3, 0, transactional=True))
        logs.produce(T, 0, data_batch([b"after"]))
    broker = open_broker(data, clock)

    def fenced() -> None:
        expect(InvalidProducerIdMappingError, 49, "INVALID_PRODUCER_ID_MAPPING", broker.produce, T, 0,
               data_batch([b"late"], 424_242, 3, 1, transactional=True))
        expect(InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH", broker.produce, T, 0,
               data_batch([b"late"], 424_242, 3, 1))  # the partition refuses its old epoch
    return Stuck(broker, 424_242, 3, None, fenced)


def stuck_outside_its_transaction(data: Path, clock: FakeClock) -> Stuck:
    """A producer the coordinator knows, whose batch is in no transaction of it (written
    before verification, after its transaction committed)."""
    with open_broker(data, clock) as first:
        first.create_topic(T, partitions=2)
        txn = RawTxn(first, "a")
        txn.send(T, 0, b"committed")
        txn.commit()
    with DurableLogs(data, clock=clock) as logs:
        logs.produce(T, 0, data_batch([b"stuck"], txn.pid, txn.epoch, 1, transactional=True))
        logs.produce(T, 0, data_batch([b"after"]))
    broker = open_broker(data, clock)
    txn.broker = broker

    def fenced() -> None:
        expect(ProducerFencedError, 90, "PRODUCER_FENCED", txn.add, (T, 1))
        expect(InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH", broker.produce, T, 0,
               data_batch([b"late"], txn.pid, txn.epoch, 2, transactional=True))
        assert describe(broker, "a").state is S.COMPLETE_ABORT
        assert committed(broker) == [b"committed", b"after"]
    return Stuck(broker, txn.pid, txn.epoch, "a", fenced)


def stuck_completing(data: Path, clock: FakeClock) -> Stuck:
    """A transaction that cannot complete: orders-0 refuses its COMMIT marker."""
    broker, txn = with_refusing_partition(data, clock)
    broker.produce(T, 0, data_batch([b"after"]))
    expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", coordinator_call, broker,
           "end_txn", "a", txn.pid, txn.epoch, True)

    def fenced() -> None:
        expect(InvalidProducerEpochError, 47, "INVALID_PRODUCER_EPOCH", broker.produce, T, 0,
               data_batch([b"late"], txn.pid, txn.epoch + 1, 1, transactional=True))
        log = broker.engine.partitions.log(T, 0)  # the partition's own fence
        assert on_loop(broker, lambda: log.producer_state.producers[txn.pid].producer_epoch) == txn.epoch + 2
        # and the commit is still never reported as one
        expect(ConcurrentTransactionsError, 51, "CONCURRENT_TRANSACTIONS", coordinator_call, broker,
               "end_txn", "a", txn.pid, txn.epoch, True)
        assert describe(broker, "a").state is S.PREPARE_COMMIT
    # the partition saw epoch + 1 already: the marker goes one further
    return Stuck(broker, txn.pid, txn.epoch + 1, None, fenced)


STUCK = {"in its transaction": stuck_in_its_transaction, "hanging": stuck_hanging,
         "outside its transaction": stuck_outside_its_transaction, "completing": stuck_completing}


def abort_by_api(broker: Broker, producer_id: int) -> dict[str, Any]:
    """The REST abort, retried as a client retries CONCURRENT_TRANSACTIONS (51): a broker
    just opened may still be completing the producer's last transaction."""
    client = create_app(broker.engine, test_config={"TESTING": True}).test_client()

    def answer():
        response = client.post(f"/v3/clusters/{broker.cluster_id}/topics/{T}/partitions/0/producers/"
                               f"{producer_id}/abort")
        return None if (response.json or {}).get("kafka_error_code") == 51 else response
    response = eventually(answer, 30, "an answer other than CONCURRENT_TRANSACTIONS", interval=0.05)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def abort_by_console(broker: Broker, producer_id: int) -> str:
    client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
    page = client.get(f"/topics/{T}/partitions/0").get_data(as_text=True)
    assert f'data-abort-producer="{producer_id}"' in page or 'data-abort="a"' in page, "no Abort offered"
    token = CSRF.search(page).group(1)
    done = client.post(f"/topics/{T}/partitions/0/producers/{producer_id}/abort",
                       data={"csrf_token": token, "next": f"/topics/{T}/partitions/0"})
    assert done.status_code == 303
    return client.get(done.headers["Location"]).get_data(as_text=True)


@pytest.mark.parametrize("route", ["api", "console"])
@pytest.mark.parametrize("kind", list(STUCK))
def test_the_partition_abort_frees_any_stuck_lso_and_fences_its_producer(data, clock, short_waits, kind, route):
    stuck = STUCK[kind](data, clock)
    broker = stuck.broker
    try:
        lso, hw = lso_and_hw(broker)
        assert lso < hw, "the producer holds the LSO"
        if route == "api":
            answer = abort_by_api(broker, stuck.producer_id)
            assert answer == {"topic_name": T, "partition_id": 0, "producer_id": stuck.producer_id,
                              "transactional_id": stuck.transactional_id,
                              "producer_epoch": stuck.epoch + 1, "last_stable_offset": hw + 1}
        else:
            page = abort_by_console(broker, stuck.producer_id)
            assert f"Producer {stuck.producer_id}:" in page and f"epoch {stuck.epoch + 1} fences it" in page
        assert_not_pinned(broker)
        assert lso_and_hw(broker)[1] == hw + 1, "one ABORT marker"
        assert b"stuck" not in committed(broker) and committed(broker)[-1:] == [b"after"]
        assert markers(broker)[-1] == (ControlType.ABORT, stuck.producer_id, stuck.epoch + 1)
        stuck.fenced()
        assert_not_pinned(broker)
        if route == "api":  # nothing is open any more: a second abort is a clear error
            client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
            again = client.post(f"/v3/clusters/{broker.cluster_id}/topics/{T}/partitions/0/producers/"
                                f"{stuck.producer_id}/abort")
            assert (again.status_code, again.json["error_name"]) == (409, "INVALID_TXN_STATE")
    finally:
        close_within(broker)


def test_an_idempotent_batch_may_not_carry_a_transactional_producer_id(broker):
    """A non-transactional batch with a transactional id's producer id one epoch up
    (any client can send one) would move that partition past the coordinator's epoch
    and make it refuse the transaction's marker: the commit could never complete."""
    txn = RawTxn(broker, "a")
    txn.send(T, 0, b"mine")
    before = footprint(broker, T, 1)
    expect(InvalidTxnStateError, 48, "INVALID_TXN_STATE", broker.produce, T, 1,
           data_batch([b"forged"], txn.pid, txn.epoch + 5, 0))
    assert footprint(broker, T, 1) == before
    txn.send(T, 1, b"also mine")
    txn.commit()
    assert committed(broker, 0) == [b"mine"] and committed(broker, 1) == [b"also mine"]
    assert describe(broker, "a").state is S.COMPLETE_COMMIT


def test_the_partition_abort_ends_offsets_a_hanging_producer_left_pending(data, clock):
    """Transactional offsets of a producer no coordinator knows (a log written without
    verification) pin the group's ``__consumer_offsets`` partition and make every
    require_stable fetch UNSTABLE_OFFSET_COMMIT: the partition's Abort ends both."""
    partition = transaction_log.partition_for("g", SMALL_INTERNAL_TOPICS["offsets.topic.num.partitions"])
    with DurableLogs(data, clock=clock) as logs:
        logs.create_topic(T, 2)
        run_inline(logs.logs.create_topic(offsets_log.TOPIC, 3, {"cleanup.policy": "compact"}, internal=True))
        pending = SimpleRecord(offsets_log.encode_offset_value(offsets_log.OffsetValue(7, -1, "", 0)),
                               key=offsets_log.encode_offset_key("g", T, 0))
        logs.produce(offsets_log.TOPIC, partition, encode_batch([pending], producer_id=424_242, producer_epoch=0,
                                                                base_sequence=0, transactional=True))
    with open_broker(data, clock) as broker:
        assert fetch_stable(broker, "g").error.name == "UNSTABLE_OFFSET_COMMIT"
        client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
        answer = client.post(f"/v3/clusters/{broker.cluster_id}/topics/{offsets_log.TOPIC}/partitions/"
                             f"{partition}/producers/424242/abort").json
        assert (answer["transactional_id"], answer["producer_epoch"]) == (None, 1)
        lso, hw = lso_and_hw(broker, offsets_log.TOPIC, partition)
        assert lso == hw == 2
        fetched = fetch_stable(broker, "g")
        assert (fetched.error, fetched.offset) == (None, -1), "stable again, the aborted offset dropped"


def test_over_the_kafka_wire_produce_answers_with_the_verification_error(tmp_path):
    """The listener hands Produce's transactional_id to the engine: the same answers,
    as error codes in the partition response, and nothing appended."""
    with KafkaBroker(tmp_path / "kafka") as kafka:
        kafka.broker.create_topic(T, 2)
        a, b = RawTxn(kafka.broker, "a"), RawTxn(kafka.broker, "b")
        a.add((T, 0))
        client = raw_connection(kafka.port)
        try:
            def produce(partition: int, txn_id: str, epoch: int) -> int:
                records = data_batch([b"v"], a.pid, epoch, 0, transactional=True)
                response = client.request(ApiKey.PRODUCE, 9, {
                    "transactional_id": txn_id, "acks": -1, "timeout": 10_000,
                    "topic_data": [{"name": T, "partition_data": [{"index": partition, "records": records}]}]})
                return response.responses[0].partition_responses[0].error_code
            assert produce(0, "a", a.epoch + 1) == 47  # INVALID_PRODUCER_EPOCH
            assert produce(0, "b", a.epoch) == 49      # INVALID_PRODUCER_ID_MAPPING: b's id, a's producer
            assert produce(1, "a", a.epoch) == 48      # INVALID_TXN_STATE at v9 (120 from v11): not added
            assert lso_and_hw(kafka.broker, T, 0) == lso_and_hw(kafka.broker, T, 1) == (0, 0)
            assert produce(0, "a", a.epoch) == 0
            assert b.pid != a.pid
        finally:
            client.close()
