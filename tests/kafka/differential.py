"""The same requests to Apache Kafka and to Exactly, and their answers side by side.

A :class:`Peer` is one broker as a test sees it: its bootstrap address, raw protocol
connections (``exactly/app/spark/kafka_client.py``'s, framed by ``exactly/app/kafka/wire.py``)
and confluent-kafka configs. :func:`plain` turns a kio response entity into nested dicts
and lists of plain values; a :class:`Normalizer` replaces what each broker chooses by
nature -- producer and member ids, cluster and topic ids, node addresses, times,
the order of unordered lists -- with stable stand-ins, so that two answers compare field
by field with ``==`` and a difference shows as the field that differs.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kio.schema.errors import ErrorCode

from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.record_batch import decode_batch, iter_headers
from tests.waiting import eventually

#: API keys, by Kafka's names
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 0, 1, 2, 3, 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 12, 13, 14, 15, 16
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 20, 21, 22
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 29, 30, 31, 32, 33
DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, DELETE_GROUPS, INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE = 35, 37, 42, 44, 47
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_CLUSTER = 50, 51, 60
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66

#: answered fields whose values are each broker's own by nature: never compared
VOLATILE = frozenset({
    "throttle_time", "cluster_id", "controller_id", "topic_id", "host", "port", "node_id", "leader_id",
    "coordinator", "leader_epoch", "current_leader", "node_endpoints", "session_id", "error_message",
    "cluster_authorized_operations", "topic_authorized_operations", "authorized_operations", "client_host",
    "log_append_time", "transaction_start_time", "last_timestamp", "log_dir", "total_bytes", "usable_bytes",
    "batch_index_error_message",
})
#: the fields that name an element of an unordered list, most significant first
IDENTITY = ("name", "topic", "resource_name", "group_id", "transactional_id", "user", "member_id", "group_instance_id",
            "partition_index", "index", "partition", "base_offset", "producer_id", "principal", "operation",
            "resource_type", "pattern_type", "mechanism")
#: Kafka's retriable "not yet" answers: a coordinator loading or moving, a leader being elected
NOT_YET = frozenset({5, 6, 14, 15, 16})


@dataclass
class Peer:
    """One of the two brokers: ``name`` is "kafka" or "exactly"."""

    name: str
    bootstrap: str
    _connections: list[KafkaConnection] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def connection(self, client_id: str | None = "raw-test", timeout: float = 20) -> KafkaConnection:
        """A raw protocol connection, closed with the peer."""
        connection = KafkaConnection("127.0.0.1", self.port, client_id, timeout)
        self._connections.append(connection)
        return connection

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """One request on a fresh connection; the answer as :func:`plain` values."""
        connection = self.connection()
        try:
            return plain(connection.request(api_key, version, body))
        finally:
            connection.close()

    def config(self, **config: Any) -> dict[str, Any]:
        """A confluent-kafka config with this broker's address."""
        return {"bootstrap.servers": self.bootstrap, **config}

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        self._connections.clear()


def plain(value: Any) -> Any:
    """A kio entity (or anything in one) as dicts, lists and plain values: error codes
    as ints, ``*Ms`` durations and times as milliseconds, UUIDs as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, ErrorCode):
        return int(value)
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class Normalizer:
    """Stable stand-ins for what each broker chooses itself: each producer id becomes
    ``pid1``, ``pid2``... and each member id ``m1``, ``m2``... in order of first
    appearance; :data:`VOLATILE` fields (and ``drop``'s) go; lists of elements with an
    :data:`IDENTITY` sort by it. One per broker per scenario, so that the two answers'
    stand-ins line up when the two brokers behaved alike."""

    def __init__(self, drop: frozenset[str] = frozenset()) -> None:
        self.drop = VOLATILE | drop
        self.ids: dict[tuple[str, Any], str] = {}

    def stand_in(self, kind: str, value: Any) -> Any:
        if value in (-1, "", None):
            return value
        return self.ids.setdefault((kind, value), f"{kind}{sum(k == kind for k, _ in self.ids) + 1}")

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            failed = value.get("error_code", 0) != 0  # Kafka's "no producer" there is 0, not a producer
            out = {}
            for key, item in value.items():
                if key in self.drop:
                    continue
                if key in ("producer_id", "ongoing_txn_producer_id") and isinstance(item, int) and not failed:
                    out[key] = self.stand_in("pid", item)
                elif key in ("member_id", "leader") and isinstance(item, str):
                    out[key] = self.stand_in("m", item)
                else:
                    out[key] = self(item)
            return out
        if isinstance(value, list):
            items = [self(v) for v in value]
            if items and all(isinstance(v, dict) and any(k in v for k in IDENTITY) for v in items):
                items.sort(key=lambda v: tuple(_sortable(v.get(k)) for k in IDENTITY))
            elif items and all(isinstance(v, int) for v in items):
                items.sort()
            return items
        return value


def compared(brokers: tuple[Peer, Peer], scenario: Callable[[Peer, str], Any], prefix: str) -> tuple[Any, Any]:
    """``scenario(peer, name)`` on the real Kafka, then on Exactly, with the same fresh
    name (topics, groups and ids are named after it); both outcomes."""
    name = unique(prefix)
    kafka, exactly = brokers
    return scenario(kafka, name), scenario(exactly, name)


def subscription(topic: str) -> bytes:
    """A consumer's JoinGroup metadata (ConsumerProtocolSubscription v1) for ``topic``."""
    return b"\x00\x01\x00\x00\x00\x01" + len(topic).to_bytes(2, "big") + topic.encode() + b"\xff\xff\xff\xff"


def _sortable(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int) else (1, "" if value is None else str(value))


def unique(prefix: str) -> str:
    """A name no other test of the session has: the real Kafka lives for the whole session."""
    return f"{re.sub(r'[^A-Za-z0-9._-]', '-', prefix)[:60]}-{uuid.uuid4().hex[:8]}"


def retry(call: Callable[[], dict[str, Any]], timeout: float = 30) -> dict[str, Any]:
    """``call()`` again while it answers :data:`NOT_YET` (at the top or anywhere in it:
    a coordinator loading, a group rebalancing, a leader not known yet), until
    ``timeout``; the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = call()
        if not _not_yet(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def settled(connection: KafkaConnection, api_key: int, version: int, body: Mapping[str, Any],
            timeout: float = 30) -> dict[str, Any]:
    """One request, as :func:`retry` asks it, and again while it answers
    CONCURRENT_TRANSACTIONS (51): Kafka answers EndTxn before its markers are written,
    and a transactional request meanwhile gets 51, which a client retries."""
    answer = retry(lambda: plain(connection.request(api_key, version, body)), timeout)
    deadline = time.monotonic() + timeout
    while answer.get("error_code") == 51 and time.monotonic() < deadline:
        time.sleep(0.05)
        answer = plain(connection.request(api_key, version, body))
    return answer


class Recorded:
    """A scenario's requests on one connection to ``peer``: each answer :func:`settled`,
    and kept normalized in :attr:`steps` under its step's name."""

    def __init__(self, peer: Peer) -> None:
        self.normalize = Normalizer()
        self.connection = peer.connection()
        self.steps: dict[str, Any] = {}

    def ask(self, step: str, api_key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        answer = settled(self.connection, api_key, version, body)
        self.steps[step] = self.normalize(answer)
        return answer

    def init_producer_id(self, transactional_id: str) -> tuple[int, int]:
        """InitProducerId v5 of ``transactional_id`` (step "init"): its producer id and epoch."""
        init = self.ask("init", INIT_PRODUCER_ID, 5, {"transactional_id": transactional_id,
                                                      "transaction_timeout": 60_000, "producer_id": -1,
                                                      "producer_epoch": -1})
        return init["producer_id"], init["producer_epoch"]


def _not_yet(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("error_code") in NOT_YET or any(_not_yet(v) for v in value.values())
    if isinstance(value, list):
        return any(_not_yet(v) for v in value)
    return False


# -- requests that every scenario makes --------------------------------------------------------


def create_topics(peer: Peer, topics: Mapping[str, tuple[int, Mapping[str, str]]]) -> None:
    """CreateTopics of ``{name: (partitions, configs)}``, each of which must succeed;
    returns once :func:`led`."""
    answer = peer.request(CREATE_TOPICS, 4, {"timeout": 30_000, "topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}
        for name, (partitions, configs) in topics.items()]})
    assert all(t["error_code"] == 0 for t in answer["topics"]), (peer.name, answer)
    led(peer, {name: partitions for name, (partitions, _) in topics.items()})


def led(peer: Peer, topics: Mapping[str, int]) -> None:
    """Wait until every partition of ``{name: partitions}`` answers ListOffsets: Kafka's
    broker learns of a topic from its controller a moment after CreateTopics answers (on
    a loaded machine, seconds after), and leads its partitions a moment after that
    (UNKNOWN_TOPIC_OR_PARTITION, then NOT_LEADER_OR_FOLLOWER meanwhile)."""
    every_partition = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": p, "timestamp": -1, "current_leader_epoch": -1}
                                      for p in range(partitions)]} for name, partitions in topics.items()]}
    eventually(lambda: all(p["error_code"] == 0 for t in peer.request(LIST_OFFSETS, 5, every_partition)["topics"]
                           for p in t["partitions"]), 30, f"{peer.name} to lead {list(topics)}", interval=0.02)


def produce(connection: KafkaConnection, topic: str, partition: int, batch: bytes, acks: int = -1,
            transactional_id: str | None = None) -> dict[str, Any]:
    """One Produce v9 of one batch; the partition's answer as :func:`plain` values."""
    answer = connection.request(PRODUCE, 9, {
        "transactional_id": transactional_id, "acks": acks, "timeout": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return plain(answer)["responses"][0]["partition_responses"][0]


def fetch(peer: Peer, normalize: Normalizer, topic: str, partition: int = 0, isolation_level: int = 0,
          offset: int = 0) -> dict[str, Any]:
    """A Fetch v11 of one partition from ``offset``, its record batches decoded: each
    batch's header fields and its records' offsets, keys, values and headers."""
    answer = peer.request(FETCH, 11, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation_level,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": offset, "current_leader_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}]})
    found = answer["responses"][0]["partitions"][0]
    records = found.pop("records") or b""
    found["batches"] = [_batch(normalize, records[at:at + header.size]) for at, header in iter_headers(records)]
    return normalize(found)


def _batch(normalize: Normalizer, data: bytes) -> dict[str, Any]:
    batch = decode_batch(data)
    header = batch.header
    return {"base_offset": header.base_offset, "attributes": header.attributes,
            "last_offset_delta": header.last_offset_delta, "producer_id": normalize.stand_in("pid", header.producer_id),
            "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
            "record_count": header.record_count, "partition_leader_epoch": header.partition_leader_epoch,
            "size": header.size, "records": [[r.offset, r.key, r.value, list(r.headers)] for r in batch.records]}


def list_offset(connection: KafkaConnection, topic: str, timestamp: int, isolation_level: int = 0,
                partition: int = 0) -> dict[str, Any]:
    """ListOffsets v5 of one partition at ``timestamp`` (-1 latest, -2 earliest)."""
    answer = connection.request(LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": isolation_level, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                        "current_leader_epoch": -1}]}]})
    return plain(answer)["topics"][0]["partitions"][0]


def init_producer_id(connection: KafkaConnection, transactional_id: str | None,
                     timeout_ms: int = 60_000) -> dict[str, Any]:
    """InitProducerId v4, retried while the coordinator loads (Kafka's first ask)."""
    return retry(lambda: plain(connection.request(INIT_PRODUCER_ID, 4, {
        "transactional_id": transactional_id, "transaction_timeout": timeout_ms,
        "producer_id": -1, "producer_epoch": -1})))
