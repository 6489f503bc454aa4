"""Faults on purpose (``exactly/app/faults/``), as real clients meet them: one in-process broker
for the module, a fresh topic per test, every fault removed after each test.

Each action shows the client's documented reaction: a retriable error retried and the
data written once, a non-retriable one surfaced, a connection closed after the work
met by an idempotent retry that is deduplicated, no answer met by the client's
timeout while the broker serves others, a delay measured -- for confluent-kafka; and
kafka-python and aiokafka retrying through errors and closed connections. Then the
budget (first N, every, seeded probability), installation order, windows, and the
event presets.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any, Iterator

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from exactly.app.faults import Action, FaultError, Faults, declare
from exactly.app.faults.fault import RequestFacts
from exactly.storage.read_committed import read_records
from tests.kafka_support import KafkaBroker, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

PRODUCE, FETCH, END_TXN = 0, 1, 26
_topics = itertools.count()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("faults") / "data") as k:
        yield k


@pytest.fixture(autouse=True)
def no_faults_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "kafka" in request.fixturenames:
        request.getfixturevalue("kafka").broker.faults.clear()


def topic(kafka: KafkaBroker, partitions: int = 1) -> str:
    name = f"t{next(_topics)}"
    kafka.broker.create_topic(name, partitions)
    return name


def producer(kafka: KafkaBroker, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "retry.backoff.ms": 20,
                     "retry.backoff.max.ms": 50, **config})


def send(p: Producer, name: str, values: list[bytes], partition: int = 0, timeout: float = 30) -> list[Any]:
    """Produce ``values`` and flush; each delivery's error (None: delivered)."""
    errors: list[Any] = []
    for value in values:
        p.produce(name, value, partition=partition, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(timeout) == 0
    return errors


def stored(kafka: KafkaBroker, name: str, partitions: int = 1) -> list[bytes | None]:
    """The committed values of every partition of ``name``, partition by partition (read
    in process: the clients under test are the writers)."""
    values: list[bytes | None] = []
    for partition in range(partitions):
        r = kafka.broker.fetch(name, partition, 0, max_bytes=1 << 20, isolation_level="read_committed")
        values += [record.value for record in read_records(r.records, 0, True, r.aborted_transactions or ()).records]
    return values


# -- the model, no broker ---------------------------------------------------------------------


def facts(api_key: int = PRODUCE, **kw: Any) -> RequestFacts:
    return RequestFacts(api_key, kw.pop("client_id", "c"), kw.pop("principal", "User:ANONYMOUS"), **kw)


def test_the_first_installed_fault_that_matches_acts_and_counts() -> None:
    faults = Faults()
    fetches = faults.add(api="Fetch", error="NOT_LEADER_OR_FOLLOWER")
    orders = faults.add(api="Produce", topic="orders", error="NOT_ENOUGH_REPLICAS", count=2)
    anything = faults.add(action="delay", delay_ms=5)
    request = facts(partitions=(("orders", 0),))
    assert [faults.fire(request) for _ in range(3)] == [orders, orders, anything]
    assert (orders.fired, orders.exhausted, fetches.fired, anything.fired) == (2, True, 0, 1)
    assert orders.last_fired_ms is not None and faults.list() == [fetches, orders, anything]
    assert orders.remove() and not orders.remove() and faults.list() == [fetches, anything]
    assert faults.clear() == 2 and not faults.installed


def test_a_seeded_probability_fires_on_the_same_requests_every_run() -> None:
    def pattern(seed: int) -> list[bool]:
        faults = Faults()
        faults.add(api=PRODUCE, error="REQUEST_TIMED_OUT", probability=0.3, seed=seed)
        return [faults.fire(facts()) is not None for _ in range(200)]

    first = pattern(7)
    assert first == pattern(7) and first != pattern(8)
    assert 30 < sum(first) < 90  # about 60 of 200


def test_matching_by_client_principal_group_and_transactional_id() -> None:
    faults = Faults()
    faults.add(client_id="billing", group="*", action="close-before")
    faults.add(transactional_id="tx-1", principal="User:alice", error="CONCURRENT_TRANSACTIONS")
    assert faults.fire(facts(client_id="other", groups=("g",))) is None
    assert faults.fire(facts(client_id="billing")) is None  # names no group
    assert faults.fire(facts(client_id="billing", groups=("g",))).spec.action is Action.CLOSE_BEFORE
    assert faults.fire(facts(END_TXN, transactional_id="tx-1")) is None  # User:ANONYMOUS
    assert faults.fire(facts(END_TXN, transactional_id="tx-1", principal="User:alice")) is not None


def test_a_window_removes_the_fault_when_it_ends() -> None:
    faults = Faults()
    fault = faults.add(action="pause", duration_ms=50)
    assert fault.remaining_s() > 0 and faults.list() == [fault]
    eventually(lambda: not faults.list(), 5, "the window to end")
    assert faults.fire(facts()) is None and not faults.installed


@pytest.mark.parametrize("declared, message", [
    ({"api": "Produce", "error": "NOT_AN_ERROR"}, "unknown Kafka error"),
    ({"api": "Nope", "error": "NOT_ENOUGH_REPLICAS"}, "unknown API"),
    ({"api": "Produce"}, "say what the fault does"),
    ({"action": "pause"}, "duration_ms"),
    ({"error": "NOT_ENOUGH_REPLICAS", "count": 0}, "count"),
    ({"error": "NOT_ENOUGH_REPLICAS", "probability": 1.5}, "probability"),
])
def test_a_fault_that_cannot_work_is_refused_saying_why(declared: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message):
        declare(**declared)


# -- confluent-kafka ------------------------------------------------------------------------------


def test_a_retriable_partition_error_is_retried_and_the_other_partitions_answered_for_real(
        kafka: KafkaBroker) -> None:
    name = topic(kafka, 3)
    fault = kafka.broker.faults.add(api="Produce", topic=name, partition=1, error="NOT_ENOUGH_REPLICAS", count=3)
    p = producer(kafka, **{"enable.idempotence": True})
    # one request for the three partitions: the fault splits it
    for partition in range(3):
        p.produce(name, b"v%d" % partition, partition=partition)
    assert p.flush(30) == 0
    assert fault.fired == 3 and fault.exhausted
    assert sorted(stored(kafka, name, 3)) == [b"v0", b"v1", b"v2"]  # each once


def test_a_non_retriable_error_is_surfaced_to_the_application(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    fault = kafka.broker.faults.add(api="Produce", topic=name, error="MESSAGE_TOO_LARGE", count=1)
    errors = send(producer(kafka), name, [b"refused"])
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE] and fault.fired == 1
    assert send(producer(kafka), name, [b"accepted"]) == [None]
    assert stored(kafka, name) == [b"accepted"]


@pytest.mark.parametrize("action", ["close-before", "close-after"])
def test_a_closed_connection_is_retried_and_the_idempotent_retry_writes_once(
        kafka: KafkaBroker, action: str) -> None:
    name = topic(kafka)
    fault = kafka.broker.faults.add(api="Produce", topic=name, action=action, count=1)
    assert send(producer(kafka, **{"enable.idempotence": True}), name, [b"once"]) == [None]
    assert fault.fired == 1
    assert stored(kafka, name) == [b"once"]  # close-after: appended, and the retry deduplicated


def test_no_answer_times_the_client_out_while_the_broker_serves_others(kafka: KafkaBroker) -> None:
    name, other = topic(kafka), topic(kafka)
    fault = kafka.broker.faults.add(api="Produce", topic=name, action="no-answer")
    p = producer(kafka, **{"enable.idempotence": False, "request.timeout.ms": 500, "message.timeout.ms": 1500})
    errors: list[Any] = []
    p.produce(name, b"lost", on_delivery=lambda err, msg: errors.append(err))
    eventually(lambda: fault.fired, 10, "the fault to swallow the request")
    assert send(producer(kafka), other, [b"served"]) == [None]  # another client, served meanwhile
    assert p.flush(10) == 0
    assert [e.code() for e in errors] in ([KafkaError._MSG_TIMED_OUT], [KafkaError._TIMED_OUT])
    assert stored(kafka, name) == [] and stored(kafka, other) == [b"served"]


def test_a_delay_delays_the_answer_by_at_least_that(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    p = producer(kafka)
    assert send(p, name, [b"warm"]) == [None]  # connected, metadata known
    fault = kafka.broker.faults.add(api="Produce", topic=name, delay_ms=300)
    started = time.monotonic()
    assert send(p, name, [b"late"]) == [None]
    assert time.monotonic() - started >= 0.3 and fault.fired == 1


def test_a_fetch_error_on_one_partition_leaves_the_others_read(kafka: KafkaBroker) -> None:
    name = topic(kafka, 2)
    for partition in range(2):
        assert send(producer(kafka), name, [b"p%d" % partition], partition) == [None]
    fault = kafka.broker.faults.add(api="Fetch", topic=name, partition=0, error="NOT_LEADER_OR_FOLLOWER", count=3)
    read = read_to_end({"bootstrap.servers": kafka.bootstrap, "group.id": f"read-{name}"}, name, 2)
    assert sorted(read) == [b"p0", b"p1"]
    assert fault.fired == 3


# -- kafka-python ---------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [
    {"error": "NOT_ENOUGH_REPLICAS", "count": 2},
    {"action": "close-before", "count": 1},
    {"action": "close-after", "count": 1},
    {"delay_ms": 200, "count": 1},
])
def test_kafka_python_retries_through_the_fault(kafka: KafkaBroker, declared: dict[str, Any]) -> None:
    from kafka import KafkaProducer

    name = topic(kafka)
    p = KafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, acks="all",
                      retry_backoff_ms=20, request_timeout_ms=5000)
    try:
        p.send(name, b"warm").get(10)
        fault = kafka.broker.faults.add(api="Produce", topic=name, **declared)
        started = time.monotonic()
        p.send(name, b"through").get(20)
        elapsed = time.monotonic() - started
    finally:
        p.close(5)
    assert fault.fired == declared["count"]
    assert elapsed >= declared.get("delay_ms", 0) / 1000
    assert stored(kafka, name) == [b"warm", b"through"]  # close-after: the idempotent retry deduplicated


# -- aiokafka -------------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [
    {"error": "NOT_ENOUGH_REPLICAS", "count": 2},  # retriable: retried after retry_backoff_ms
    {"action": "close-before", "count": 1},  # KafkaConnectionError: retriable, sent again
    {"action": "close-after", "count": 1},  # a lost response: the idempotent retry is deduplicated
])
def test_aiokafka_retries_through_the_fault_and_writes_once(kafka: KafkaBroker, declared: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaProducer

    name = topic(kafka)

    async def scenario() -> Any:
        p = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, retry_backoff_ms=20,
                             request_timeout_ms=5000)
        await p.start()
        try:
            await p.send_and_wait(name, b"warm", partition=0)  # connected, metadata known
            fault = kafka.broker.faults.add(api="Produce", topic=name, **declared)
            await p.send_and_wait(name, b"through", partition=0)
            return fault
        finally:
            await p.stop()

    fault = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert fault.fired == declared["count"]
    assert stored(kafka, name) == [b"warm", b"through"]


# -- events ---------------------------------------------------------------------------------------


def test_a_transactional_producer_waits_out_a_coordinator_loading_and_commits(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    p = producer(kafka, **{"transactional.id": f"tx-{name}"})
    p.list_topics(timeout=20)  # connected first: the window below is spent on InitProducerId, not connecting
    faults = kafka.broker.faults.event("coordinator-load-in-progress", 1000, coordinator="transaction")
    started = time.monotonic()
    p.init_transactions(20)
    assert faults[0].fired >= 1, "InitProducerId met the loading coordinator"
    assert time.monotonic() - started >= 0.9  # and the client waited it out (the window, from installation)
    p.begin_transaction()
    p.produce(name, b"committed")
    p.commit_transaction(20)
    assert stored(kafka, name) == [b"committed"]


def test_a_transaction_coordinator_unavailable_then_back_lets_the_commit_finish(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    p = producer(kafka, **{"transactional.id": f"tx-{name}"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(name, b"in the transaction")
    p.flush(20)
    (fault,) = kafka.broker.faults.event("coordinator-not-available", 300, coordinator="transaction")
    p.commit_transaction(20)
    assert fault.fired >= 1 and fault.spec.event == "coordinator-not-available (transaction)"


def test_a_group_coordinator_that_moved_makes_the_commit_retry(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{name}",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
        (fault,) = kafka.broker.faults.event("not-coordinator", 300, coordinator="group")
        deadline = time.monotonic() + 20
        while True:  # librdkafka surfaces NOT_COORDINATOR to a synchronous commit; the app retries
            try:
                consumer.commit(offsets=[TopicPartition(name, 0, 1)], asynchronous=False)
                break
            except KafkaException as e:
                assert e.args[0].code() == KafkaError.NOT_COORDINATOR and time.monotonic() < deadline
        assert fault.fired >= 1
        assert consumer.committed([TopicPartition(name, 0)], timeout=10)[0].offset == 1
    finally:
        consumer.close()


def test_a_pause_holds_every_answer_and_loses_none(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    p = producer(kafka, **{"enable.idempotence": True})
    assert send(p, name, [b"before"]) == [None]
    (pause,) = kafka.broker.faults.event("pause", 300)
    started = time.monotonic()
    assert send(p, name, [b"held", b"also held"]) == [None, None]
    assert time.monotonic() - started >= 0.25 and pause.fired >= 1
    assert stored(kafka, name) == [b"before", b"held", b"also held"]


def test_a_full_disk_refuses_writes_until_removed(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    p = producer(kafka, **{"enable.idempotence": True})
    assert send(p, name, [b"before"]) == [None]
    disk_full = kafka.broker.faults.event("disk-full")
    errors: list[Any] = []
    p.produce(name, b"waits for space", on_delivery=lambda err, msg: errors.append(err))
    eventually(lambda: p.poll(0) >= 0 and disk_full[0].fired >= 2, 10, "KAFKA_STORAGE_ERROR answered and retried")
    assert kafka.broker.faults.clear() == len(disk_full)
    assert p.flush(20) == 0 and errors == [None]
    assert stored(kafka, name) == [b"before", b"waits for space"]


def test_with_no_fault_installed_the_listener_has_nothing_to_check(kafka: KafkaBroker) -> None:
    name = topic(kafka)
    assert not kafka.broker.faults.installed
    assert send(producer(kafka), name, [b"plain"]) == [None]
    assert stored(kafka, name) == [b"plain"]


#: the newest version a client sends, where the broker serves newer ones to brokers only:
#: AddPartitionsToTxn v4+ is the brokers' batched form (KIP-890), its partitions under
#: each transaction, which a fault does not look into
CLIENTS_NEWEST = {"add_partitions_to_txn": 3}


def test_shapes_are_derived_for_every_partitioned_api() -> None:
    from kio.index import load_request_schema, load_response_schema

    from exactly.app.kafka.fault_shapes import partitioned
    from exactly.app.kafka.api import APIS

    found = {}
    for key, api in APIS.items():
        version = CLIENTS_NEWEST.get(api.name, api.max_version)
        request = partitioned(load_request_schema(key, version))
        if request is not None:
            found[api.name] = (request, partitioned(load_response_schema(key, version)))
    assert {"produce", "fetch", "list_offsets", "offset_commit", "txn_offset_commit", "add_partitions_to_txn",
            "delete_records"} <= set(found)
    for name in ("produce", "fetch", "list_offsets", "txn_offset_commit", "add_partitions_to_txn"):
        request, response = found[name]
        assert response is not None and response.error is not None, name



# -- splitting a request and merging the answers (property) ----------------------------------


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sets(st.integers(0, 5), min_size=1), min_size=1),
       st.data())
@settings(max_examples=60, deadline=None)
def test_a_split_request_is_answered_once_per_partition(layout: dict[str, set[int]], data: st.DataObject) -> None:
    """Whatever partitions a fault takes, the merged answer has every partition of the
    request exactly once: the faulted ones with the fault's error, the rest as the
    handler answered them."""
    from kio.index import load_request_schema

    from exactly.app.kafka import fault_shapes as shapes
    from exactly.app.kafka.wire import build

    request = build(load_request_schema(PRODUCE, 9), {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": t, "partition_data": [{"index": p, "records": b""} for p in sorted(ps)]} for t, ps in layout.items()]})
    every = shapes.partitions_of(request)
    assume(len(every) >= 2)  # a fault on some partitions, not all (all: no handler runs)
    faulted = tuple(data.draw(st.lists(st.sampled_from(every), unique=True, min_size=1, max_size=len(every) - 1)))
    rest = shapes.without(request, lambda t, p: (t, p) in faulted)
    assert sorted(shapes.partitions_of(rest)) == sorted(set(every) - set(faulted))
    real = {"responses": [{"name": t.name, "partition_responses": [{"index": p.index, "error_code": 0}
                                                                   for p in t.partition_data]}
                          for t in rest.topic_data]}
    answer = shapes.merge(PRODUCE, 9, real, shapes.error_answer(PRODUCE, 9, 19, request, faulted))
    answered = [(t["name"], p["index"], p["error_code"]) for t in answer["responses"]
                for p in t["partition_responses"]]
    assert sorted(answered) == sorted((t, p, 19 if (t, p) in faulted else 0) for t, p in every)


# -- the coordinators' own writes -----------------------------------------------------------------


def test_a_coordinators_own_writes_meet_only_the_faults_that_name_them(kafka: KafkaBroker) -> None:
    """A transaction's markers are a WriteTxnMarkers request, as in Kafka: a fault naming
    it holds them (the commit waits, the LSO with it) until removed; a fault on every
    Produce is the clients' and leaves the coordinator's writes alone."""
    name, broker = topic(kafka), kafka.broker
    every_produce = broker.faults.add(api="Produce", error="NOT_ENOUGH_REPLICAS")
    txn = broker.producer(transactional_id=f"{name}-tx")  # embedded: its requests skip the listener
    txn.init_transactions()
    txn.begin_transaction()
    txn.send(name, b"held", partition=0).get(timeout=10)
    held = broker.faults.add(api="WriteTxnMarkers", topic=name, action="no-answer")
    committing = threading.Thread(target=txn.commit_transaction, daemon=True)
    committing.start()
    eventually(lambda: held.fired == 1, 10, "the marker write to meet its fault")
    assert committing.is_alive() and broker.list_offsets(name, 0, -1, "read_committed") == 0
    held.remove()
    committing.join(10)
    assert not committing.is_alive()
    assert broker.list_offsets(name, 0, -1, "read_committed") == broker.list_offsets(name, 0, -1) == 2
    assert every_produce.fired == 0  # the transaction log's appends and the marker are not a client's Produce
    txn.close()
