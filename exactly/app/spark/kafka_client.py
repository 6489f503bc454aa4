"""A small, blocking Kafka protocol client for what the exactly-once sink needs and
confluent-kafka cannot do: KIP-939 two-phase commit (InitProducerId v6 with
``enable2Pc`` / ``keepPreparedTxn``), completing another process's transaction, and
the operator APIs that find open transactions (ListTransactions v2's
``transactional_id_pattern``, DescribeTransactions). Metadata and FindCoordinator are
here only to route those requests (and the transaction's Produce) to their node;
topics and group offsets go through confluent-kafka (``exactly/app/spark/kafka_admin.py``).

:class:`KafkaConnection` is one socket speaking requests at the version asked for;
the tests use it as their raw client (``tests/kafka_support.py``).

Requests are framed with ``exactly/app/kafka/wire.py`` (kio). Each API is sent at one fixed
version that Exactly and Kafka 4.x both serve. An error answer raises the
``exactly/storage/errors.py`` class of its Kafka code; :meth:`KafkaClient.retrying` repeats a
call on retriable ones (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS,
NOT_COORDINATOR, ...) with backoff until a deadline, finding the coordinator again
after NOT_COORDINATOR.

:class:`TransactionalProducer` writes v2 record batches (``exactly/storage/record_batch.py``)
in a transaction that it leaves open -- *prepared*, in KIP-939's words -- for
another process to complete.
"""

from __future__ import annotations

import functools
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

from exactly.app.kafka.wire import ApiKey, CoordinatorType, decode_response, encode_request, millis
from exactly.storage.errors import (
    KafkaError,
    NotCoordinatorError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from exactly.storage.record_batch import SimpleRecord, encode_batch

#: the version each API is sent at
VERSIONS = {ApiKey.PRODUCE: 9, ApiKey.METADATA: 8, ApiKey.FIND_COORDINATOR: 3, ApiKey.INIT_PRODUCER_ID: 6,
            ApiKey.ADD_PARTITIONS_TO_TXN: 3, ApiKey.END_TXN: 3, ApiKey.DESCRIBE_TRANSACTIONS: 0,
            ApiKey.LIST_TRANSACTIONS: 2}
#: Produce acks=all
ACKS_ALL = -1
#: flush a producer's buffered records once they reach this many bytes (one request)
FLUSH_BYTES = 512 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class InitResult:
    """InitProducerId's answer: the id/epoch to use from now on, and (keepPreparedTxn)
    the id/epoch the kept Ongoing transaction was written with (-1/-1: none was)."""

    producer_id: int
    producer_epoch: int
    ongoing_producer_id: int = -1
    ongoing_producer_epoch: int = -1


@dataclass(frozen=True)
class TransactionListing:
    """One ListTransactions entry."""

    transactional_id: str
    producer_id: int
    state: str


class KafkaClient:
    """Blocking requests to a broker (or cluster) reached at ``bootstrap``
    (``host:port[,host:port...]``), one connection per node."""

    def __init__(self, bootstrap: str, client_id: str = "exactly-spark", timeout: float = 30.0) -> None:
        self.bootstrap = [_host_port(address) for address in bootstrap.split(",") if address.strip()]
        if not self.bootstrap:
            raise ValueError("kafka.bootstrap.servers is empty")
        self.client_id = client_id
        self.timeout = timeout
        self._connections: dict[Any, KafkaConnection] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._coordinators: dict[str, int] = {}

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> "KafkaClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------

    def request(self, api_key: ApiKey, body: Mapping[str, Any], node: int | None = None) -> Any:
        """One request at :data:`VERSIONS`' version to ``node`` (None: any bootstrap
        server); the response entity. A broken connection is dropped and raises."""
        connection = self._connection(node)
        try:
            return connection.request(api_key, VERSIONS[api_key], body)
        except OSError:
            connection.close()
            self._connections.pop(node, None)
            raise

    def retrying(self, call: Callable[[], T], deadline_s: float | None = None) -> T:
        """:func:`retrying` with this client's timeout, finding coordinators again after
        NOT_COORDINATOR."""
        def forget(error: BaseException) -> None:
            if isinstance(error, NotCoordinatorError):
                self._coordinators.clear()
        return retrying(call, self.timeout if deadline_s is None else deadline_s, forget)

    def _connection(self, node: int | None) -> "KafkaConnection":
        connection = self._connections.get(node)
        if connection is not None:
            return connection
        if node is None:
            connection = self._connect_bootstrap()
        else:
            if node not in self._nodes:
                self.metadata([])
            connection = KafkaConnection(*self._nodes[node], self.client_id, self.timeout)
        self._connections[node] = connection
        return connection

    def _connect_bootstrap(self) -> "KafkaConnection":
        failure: OSError | None = None
        for host, port in self.bootstrap:
            try:
                return KafkaConnection(host, port, self.client_id, self.timeout)
            except OSError as e:
                failure = e
        raise ConnectionError(f"no bootstrap server answered ({failure})")

    # -- metadata and coordinators ----------------------------------------------------------

    def metadata(self, topics: Iterable[str], create: bool = False) -> dict[str, dict[int, int]]:
        """``{topic: {partition: leader node}}`` of ``topics`` (raising a topic's error);
        learns the brokers' addresses on the way (Produce goes to a partition's leader
        and ListTransactions to every broker, on this client's own connections).
        ``create``: ask as a producer does, so a broker with ``auto.create.topics.enable``
        creates a missing topic (``num.partitions``); one without it answers
        UNKNOWN_TOPIC_OR_PARTITION, raised with what to do."""
        names = list(topics)
        response = self.request(ApiKey.METADATA, {"topics": [{"name": name} for name in names],
                                           "allow_auto_topic_creation": create})
        self._nodes.update({b.node_id: (b.host, b.port) for b in response.brokers})
        found = {}
        for topic in response.topics:
            if create and int(topic.error_code) == UnknownTopicOrPartitionError.code:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic.name!r} does not exist and the broker does not create topics on demand "
                    f"(auto.create.topics.enable=false): create it first (POST /v3/clusters/<cluster id>/topics "
                    f"or kafka-topics --create), or start the broker with --config auto.create.topics.enable=true")
            _check(int(topic.error_code), f"topic {topic.name!r}")
            found[topic.name] = {p.partition_index: p.leader_id for p in topic.partitions}
        return found

    def coordinator(self, transactional_id: str) -> int:
        """The node coordinating a transactional id (the raw transactional requests go
        there; confluent-kafka has no way to name that node)."""
        cached = self._coordinators.get(transactional_id)
        if cached is not None:
            return cached
        response = self.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": CoordinatorType.TRANSACTION})
        _check(int(response.error_code), response.error_message or "")
        self._nodes[response.node_id] = (response.host, response.port)
        self._coordinators[transactional_id] = response.node_id
        return response.node_id

    # -- transactions -------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, *, enable_2pc: bool = True,
                         keep_prepared_txn: bool = False, transaction_timeout_ms: int = 60_000) -> InitResult:
        """InitProducerId v6 (KIP-939). Without ``keep_prepared_txn`` an Ongoing
        transaction of this id is aborted; with it, the transaction is kept and its
        producer fenced (the answer's ongoing pair says what it was written with)."""
        def call() -> InitResult:
            response = self.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": transactional_id, "transaction_timeout": transaction_timeout_ms,
                "producer_id": -1, "producer_epoch": -1,
                "enable2_pc": enable_2pc, "keep_prepared_txn": keep_prepared_txn},
                self.coordinator(transactional_id))
            _check(int(response.error_code), f"InitProducerId({transactional_id!r})" + (
                TWO_PHASE_COMMIT_HINT if enable_2pc else ""))
            return InitResult(response.producer_id, response.producer_epoch,
                              response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch)
        return self.retrying(call)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)

        def call() -> None:
            response = self.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": transactional_id,
                "v3_and_below_producer_id": producer_id, "v3_and_below_producer_epoch": producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
                self.coordinator(transactional_id))
            for topic in response.results_by_topic_v3_and_below:
                for result in topic.results_by_partition:
                    _check(int(result.partition_error_code),
                                   f"AddPartitionsToTxn({transactional_id!r}, {topic.name}-{result.partition_index})")
        self.retrying(call)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """EndTxn; returns once the outcome is decided (Exactly: markers durable)."""
        def call() -> None:
            response = self.request(ApiKey.END_TXN, {"transactional_id": transactional_id, "producer_id": producer_id,
                                              "producer_epoch": producer_epoch, "committed": commit},
                                    self.coordinator(transactional_id))
            _check(int(response.error_code),
                           f"EndTxn({transactional_id!r}, {'commit' if commit else 'abort'})")
        self.retrying(call)

    def complete_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int) -> bool:
        """KIP-939's completeTransaction: fence the id's producer keeping its Ongoing
        transaction, then commit it if it was written by ``producer_id``/``producer_epoch``
        and abort it otherwise. True when that transaction is (now) committed or none
        is open any more; False when a different one was found, and aborted."""
        init = self.init_producer_id(transactional_id, keep_prepared_txn=True)
        if init.ongoing_producer_id == -1:
            return True
        prepared = (init.ongoing_producer_id, init.ongoing_producer_epoch) == (producer_id, producer_epoch)
        self.end_txn(transactional_id, init.producer_id, init.producer_epoch, commit=prepared)
        return prepared

    def abort_transaction(self, transactional_id: str) -> None:
        """Abort whatever transaction ``transactional_id`` has open (a plain InitProducerId)."""
        self.init_producer_id(transactional_id)

    def list_transactions(self, pattern: str | None = None,
                          states: Iterable[str] = ()) -> list[TransactionListing]:
        """ListTransactions v2: ids fully matching the regex ``pattern``, in ``states``
        (Kafka's display names, e.g. "Ongoing"), from every broker."""
        self.metadata([])
        found = []
        for node in sorted(self._nodes):
            response = self.retrying(functools.partial(self.request, ApiKey.LIST_TRANSACTIONS, {
                "state_filters": list(states), "producer_id_filters": [], "duration_filter": -1,
                "transactional_id_pattern": pattern}, node))
            _check(int(response.error_code), "ListTransactions")
            found += [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                      for t in response.transaction_states]
        return found

    def describe_transaction(self, transactional_id: str) -> Any:
        """DescribeTransactions of one id: state, producer id/epoch, timeout, partitions."""
        response = self.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]},
                                self.coordinator(transactional_id))
        described = response.transaction_states[0]
        _check(int(described.error_code), f"DescribeTransactions({transactional_id!r})")
        return described

    # -- produce -----------------------------------------------------------------------

    def produce(self, node: int, transactional_id: str | None,
                batches: Mapping[tuple[str, int], bytes]) -> dict[tuple[str, int], int]:
        """One Produce (acks=all) of one record batch per partition, all led by ``node``;
        the base offset each got."""
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), batch in batches.items():
            by_topic.setdefault(topic, []).append({"index": partition, "records": batch})
        response = self.request(ApiKey.PRODUCE, {
            "transactional_id": transactional_id, "acks": ACKS_ALL, "timeout": millis(int(self.timeout * 1000)),
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()]}, node)
        offsets = {}
        for topic in response.responses:
            for p in topic.partition_responses:
                _check(int(p.error_code), p.error_message or f"Produce({topic.name}-{p.index})")
                offsets[(topic.name, p.index)] = p.base_offset
        return offsets


class TransactionalProducer:
    """Writes records in one two-phase-commit transaction of ``transactional_id`` and
    leaves it open: :meth:`prepare` flushes and returns the producer id and epoch that
    the transaction's completer compares (KIP-939's PreparedTxnState).

    :meth:`begin` fences an earlier producer of the same id and aborts what it left
    open. Records are buffered per partition and sent as one v2 batch per partition
    per Produce request, with per-partition sequence numbers (acks=all)."""

    def __init__(self, client: KafkaClient, transactional_id: str) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.producer_id = self.producer_epoch = -1
        self._leaders: dict[str, dict[int, int]] = {}
        self._added: set[tuple[str, int]] = set()
        self._sequences: dict[tuple[str, int], int] = {}
        self._pending: dict[tuple[str, int], list[SimpleRecord]] = {}
        self._pending_bytes = 0
        self.records_sent = 0

    def begin(self) -> None:
        init = self.client.init_producer_id(self.transactional_id)
        self.producer_id, self.producer_epoch = init.producer_id, init.producer_epoch

    def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (metadata cached per producer)."""
        return len(self._leaders_of(topic))

    def send(self, topic: str, partition: int, record: SimpleRecord) -> None:
        leaders = self._leaders_of(topic)
        if partition not in leaders:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist ({len(leaders)} partitions)")
        self._pending.setdefault((topic, partition), []).append(record)
        self._pending_bytes += len(record.value or b"") + len(record.key or b"") + 16
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Send every buffered record (AddPartitionsToTxn first for new partitions)."""
        if not self._pending:
            return
        new = [tp for tp in self._pending if tp not in self._added]
        if new:
            self.client.add_partitions(self.transactional_id, self.producer_id, self.producer_epoch, new)
            self._added.update(new)
        by_leader: dict[int, dict[tuple[str, int], bytes]] = {}
        for (topic, partition), records in self._pending.items():
            sequence = self._sequences.get((topic, partition), 0)
            by_leader.setdefault(self._leaders[topic][partition], {})[(topic, partition)] = encode_batch(
                records, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                base_sequence=sequence, transactional=True)
            self._sequences[(topic, partition)] = sequence + len(records)
            self.records_sent += len(records)
        for leader, batches in by_leader.items():
            self.client.produce(leader, self.transactional_id, batches)
        self._pending.clear()
        self._pending_bytes = 0

    def prepare(self) -> tuple[int, int]:
        """Flush and leave the transaction open: ``(producer id, epoch)`` it was written with."""
        self.flush()
        return self.producer_id, self.producer_epoch

    def _leaders_of(self, topic: str) -> dict[int, int]:
        """A topic's leaders; a missing topic is created as Kafka's producers have it
        created (Metadata allowing auto-creation: the broker's auto.create.topics.enable)."""
        if topic not in self._leaders:
            self._leaders.update(self.client.metadata([topic], create=True))
        return self._leaders[topic]


def retrying(call: Callable[[], T], deadline_s: float,
             on_retry: Callable[[BaseException], None] = lambda error: None) -> T:
    """``call()``, repeated with backoff while it raises a retriable Kafka error or
    loses its connection (``on_retry`` sees each such error), until ``deadline_s`` seconds."""
    deadline = time.monotonic() + deadline_s
    backoff = 0.02
    while True:
        try:
            return call()
        except (KafkaError, OSError) as e:
            if isinstance(e, KafkaError) and not e.retriable:
                raise
            on_retry(e)
            if time.monotonic() + backoff > deadline:
                raise
        time.sleep(backoff)
        backoff = min(backoff * 2, 1.0)


class KafkaConnection:
    """One socket to one broker; requests framed from mappings (``exactly/app/kafka/wire.py``) at
    the version asked for, answered in order. The tests speak through it too, for
    what no real client sends (exact versions, pipelining, hostile frames)."""

    def __init__(self, host: str, port: int, client_id: str | None, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._next_correlation = 0

    def frame(self, api_key: int, version: int, body: Mapping[str, Any], correlation_id: int | None = None) -> bytes:
        """The bytes of one request frame (the next correlation id unless one is given)."""
        if correlation_id is None:
            correlation_id = self._next_correlation
            self._next_correlation += 1
        return encode_request(api_key, version, correlation_id, self.client_id, body)

    def send(self, api_key: int, version: int, body: Mapping[str, Any], correlation_id: int | None = None) -> None:
        self.sock.sendall(self.frame(api_key, version, body, correlation_id))

    def read_frame(self) -> bytes:
        """The next response frame, its size prefix removed."""
        size = int.from_bytes(self._read_exactly(4), "big")
        return self._read_exactly(size)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """``(correlation id, response entity)`` of the next response."""
        return decode_response(api_key, version, self.read_frame())

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        """Send one request and read its response entity (correlation id checked)."""
        correlation = self._next_correlation
        self.send(api_key, version, body)
        answered, response = self.receive(api_key, version)
        if answered != correlation:
            raise ConnectionError(f"response to request {answered} where {correlation} was expected")
        return response

    def closed_by_peer(self) -> bool:
        """True when the broker has closed the connection (reads EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read_exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if not n:
                raise ConnectionError("the broker closed the connection")
            got += n
        return bytes(buffer)

    def close(self) -> None:
        self.sock.close()


#: what a refused two-phase InitProducerId most likely means (KIP-939's two guards)
TWO_PHASE_COMMIT_HINT = (" with enable2Pc (the broker needs transaction.two.phase.commit.enable=true, false by "
                         "default; with an authorizer, Write and TwoPhaseCommit on the transactional id)")


def _check(code: int, what: str) -> None:
    """Raise the ``exactly/storage/errors.py`` class of a Kafka error code, naming the request
    and the error (NONE: nothing)."""
    if code:
        error = error_for_code(code)
        raise error(f"{what}: {error.name} ({code})")


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad bootstrap server {address!r}: expected host:port")
    return host, int(port)
