"""Bad input and bad clients never hurt the broker or the other clients: malformed
frames, sizes over ``socket.request.max.bytes``, garbage, a disconnect in the
middle of a request, a client that never reads its responses -- each closes that
one connection with a log line naming the client and what was wrong. Then a
hypothesis fuzz of random and mutated frames against a live listener, after which
a real client still produces and consumes and every log recovers unchanged."""

from __future__ import annotations

import logging
import socket
import struct
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.app.kafka.api import ApiKey
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.app.kafka.wire import encode_request
from exactly.storage import filenames
from exactly.storage.record_batch import SimpleRecord, encode_batch, validate_batch
from tests.kafka_support import CONFIG, SOFTWARE, KafkaBroker, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(300)
SERVER_LOG = "exactly.app.kafka.server"


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def logged(caplog: pytest.LogCaptureFixture, *parts: str) -> bool:
    return any(all(p in r.getMessage() for p in parts) for r in caplog.records)


def address(client: KafkaConnection) -> str:
    host, port = client.sock.getsockname()[:2]
    return f"{host}:{port}"


def still_serves(kafka: KafkaBroker) -> None:
    other = raw_connection(kafka.port, client_id="bystander")
    assert other.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0
    other.close()


@pytest.mark.parametrize("size", [104_857_601, 2**31 - 1, -5])
def test_a_size_outside_socket_request_max_bytes_closes_the_connection(kafka: KafkaBroker, caplog, size: int) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    bad = raw_connection(kafka.port)
    bad.sock.sendall(struct.pack(">i", size))
    assert bad.closed_by_peer()
    assert logged(caplog, address(bad), f"request size {size}", "socket.request.max.bytes")
    still_serves(kafka)


def test_socket_request_max_bytes_is_configurable(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    with KafkaBroker(tmp_path / "d", **{"socket.request.max.bytes": 1000}) as kafka:
        kafka.broker.create_topic("t", 1)
        client = raw_connection(kafka.port)
        records = encode_batch([SimpleRecord(bytes(2000))])
        client.send(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
        assert client.closed_by_peer()
        assert kafka.broker.list_offsets("t", 0, -1) == 0


def test_http_garbage_is_refused(kafka: KafkaBroker, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    bad = raw_connection(kafka.port)
    bad.sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert bad.closed_by_peer()
    assert logged(caplog, address(bad), "request size 1195725856")  # b"GET " as a size
    still_serves(kafka)


def test_an_undecodable_request_is_logged_after_earlier_requests_are_answered(kafka: KafkaBroker, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    client = raw_connection(kafka.port, client_id="sloppy")
    good = client.frame(ApiKey.API_VERSIONS, 3, SOFTWARE, correlation_id=1)
    metadata = client.frame(ApiKey.METADATA, 8, {"topics": [{"name": "t"}]}, correlation_id=2)
    truncated = struct.pack(">i", len(metadata) - 4 - 3) + metadata[4:-3]
    client.sock.sendall(good + truncated)
    assert client.receive(ApiKey.API_VERSIONS, 3)[0] == 1  # what came before the bad frame is answered
    assert client.closed_by_peer()
    assert logged(caplog, "client 'sloppy' at " + address(client), "undecodable request")
    still_serves(kafka)


def test_a_frame_too_short_for_a_header_is_refused(kafka: KafkaBroker, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    client = raw_connection(kafka.port)
    client.sock.sendall(struct.pack(">i", 3) + b"\x00\x12\x00")
    assert client.closed_by_peer()
    assert logged(caplog, address(client), "shorter than a request header")


def test_a_disconnect_in_the_middle_of_a_request_is_logged(kafka: KafkaBroker, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    client = raw_connection(kafka.port)
    where = address(client)
    client.sock.sendall(struct.pack(">i", 100) + bytes(10))
    client.sock.shutdown(socket.SHUT_WR)
    eventually(lambda: logged(caplog, where, "in the middle of a request (10 of 100 bytes)"), what="the log line")
    client.close()
    still_serves(kafka)


def test_a_client_that_never_reads_stalls_only_itself(tmp_path: Path, caplog) -> None:
    """It pipelines fetches of 1 MB and reads nothing: the broker stops reading from
    it (bounded), says so, serves everyone else, and closes it once it has been
    silent for connections.max.idle.ms."""
    caplog.set_level(logging.INFO, logger=SERVER_LOG)
    with KafkaBroker(tmp_path / "d", **{"connections.max.idle.ms": 2000}) as kafka:
        kafka.broker.create_topic("big", 1)
        for _ in range(4):
            kafka.broker.produce("big", 0, encode_batch([SimpleRecord(bytes(256 * 1024))]))
        hog = raw_connection(kafka.port, client_id="hog")
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        fetch = hog.frame(ApiKey.FETCH, 11, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                             "isolation_level": 0, "session_epoch": -1, "topics": [
                                                 {"topic": "big", "partitions": [
                                                     {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        hog.sock.setblocking(False)
        pushed_back = False
        for _ in range(200_000):  # 17 MB of requests: more than any socket buffers hold
            try:
                hog.sock.send(fetch)
            except BlockingIOError:
                pushed_back = True  # the broker stopped reading: TCP pushes back
                break
        assert pushed_back
        eventually(lambda: logged(caplog, "client 'hog'", "is not reading its responses"), what="the stall line")
        still_serves(kafka)
        eventually(lambda: logged(caplog, "closing client 'hog'", "has not read its responses"),
                   what="the idle close")
        eventually(lambda: not kafka.listener.connections, what="the hog's connection to go")
        hog.close()


# -- fuzz ----------------------------------------------------------------------------------------


def _seed_frames() -> list[bytes]:
    """Valid requests of many APIs and versions, for mutation (no CreateTopics: a
    mutated partition count could ask for billions of partitions, as it could of Kafka)."""
    batch = encode_batch([SimpleRecord(b"value", key=b"key")], producer_id=7, producer_epoch=0, base_sequence=0)
    requests = [
        (ApiKey.API_VERSIONS, 0, {}), (ApiKey.API_VERSIONS, 4, SOFTWARE),
        (ApiKey.METADATA, 1, {"topics": None}), (ApiKey.METADATA, 8, {"topics": [{"name": "fuzz"}]}),
        (ApiKey.PRODUCE, 3, {"acks": 1, "timeout": 100, "topic_data": [
            {"name": "fuzz", "partition_data": [{"index": 0, "records": batch}]}]}),
        (ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 100, "topic_data": [
            {"name": "fuzz", "partition_data": [{"index": 0, "records": batch}]}]}),
        (ApiKey.FETCH, 4, {"max_wait": 100, "min_bytes": 1, "topics": [
            {"topic": "fuzz", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]}),
        (ApiKey.LIST_OFFSETS, 5, {"topics": [{"name": "fuzz", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}),
        (ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["x"]}),
        (ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "fz", "transaction_timeout": 1000}),
        (ApiKey.ADD_PARTITIONS_TO_TXN, 0, {"v3_and_below_transactional_id": "fz", "v3_and_below_producer_id": 0,
                                           "v3_and_below_producer_epoch": 0,
                                           "v3_and_below_topics": [{"name": "fuzz", "partitions": [0]}]}),
        (ApiKey.END_TXN, 3, {"transactional_id": "fz", "producer_id": 0, "producer_epoch": 0, "committed": True}),
        (ApiKey.JOIN_GROUP, 5, {"group_id": "fg", "session_timeout": 6000, "rebalance_timeout": 100,
                                "member_id": "", "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": b"\x00\x00"}]}),
        (ApiKey.OFFSET_COMMIT, 7, {"group_id": "fg", "member_id": "", "topics": [
            {"name": "fuzz", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}),
        (ApiKey.OFFSET_FETCH, 7, {"group_id": "fg", "topics": None, "require_stable": True}),
        (ApiKey.TXN_OFFSET_COMMIT, 3, {"transactional_id": "fz", "group_id": "fg", "producer_id": 0,
                                       "producer_epoch": 0, "topics": []}),
        (ApiKey.DESCRIBE_CONFIGS, 2, {"resources": [{"resource_type": 2, "resource_name": "fuzz"}]}),
        (ApiKey.LIST_TRANSACTIONS, 1, {}), (ApiKey.DESCRIBE_GROUPS, 4, {"groups": ["fg"]}),
    ]
    return [encode_request(key, version, correlation, "fuzz", body)
            for correlation, (key, version, body) in enumerate(requests)]


SEEDS = _seed_frames()


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A random frame, or a valid request with a byte flipped, cut short, or padded."""
    if draw(st.booleans()):
        payload = draw(st.binary(max_size=300))
        return struct.pack(">i", len(payload)) + payload
    frame = bytearray(draw(st.sampled_from(SEEDS)))
    mutation = draw(st.sampled_from(["flip", "truncate", "extend", "size"]))
    if mutation == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(4, len(frame) - 1))
            frame[i] = draw(st.integers(0, 255))
    elif mutation == "truncate":
        frame = frame[:draw(st.integers(0, len(frame) - 1))]
    elif mutation == "extend":
        frame += draw(st.binary(min_size=1, max_size=64))
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    else:
        struct.pack_into(">i", frame, 0, draw(st.integers(-(2**31), 2**31 - 1)))
    return bytes(frame)


def test_fuzzed_frames_never_hurt_the_broker_then_a_real_client_works(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    data_dir = tmp_path / "data"
    with KafkaBroker(data_dir) as kafka:
        kafka.broker.create_topic("fuzz", 1)

        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(frames(), min_size=1, max_size=3))
        def hit(sent: list[bytes]) -> None:
            client = socket.create_connection(("127.0.0.1", kafka.port), timeout=2)
            try:
                client.sendall(b"".join(sent))
                client.settimeout(0.2)
                while client.recv(65536):
                    pass
            except (socket.timeout, ConnectionError):
                pass  # waiting (a long poll, a join) or closed: either is fine
            finally:
                client.close()

        hit()
        unexpected = [r.getMessage() for r in caplog.records
                      if r.levelno >= logging.ERROR and r.name.startswith("app.")]
        assert not unexpected, unexpected  # no handler ever failed on its input
        still_serves(kafka)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                             "broker.address.family": "v4"})
        for i in range(20):
            producer.produce("after-fuzz", b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "after", "broker.address.family": "v4",
                             "isolation.level": "read_committed"})
        consumer.assign([TopicPartition("after-fuzz", 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        eventually(lambda: values.extend(m.value() for m in consumer.consume(20, 0.2) if not m.error())
                   or len(values) >= 20, what="the records produced after the fuzz")
        consumer.close()
        assert values == [b"v%d" % i for i in range(20)]
        ends = {key: log.log_end_offset for key, log in kafka.engine.partitions.logs()}
    (data_dir / filenames.CLEAN_SHUTDOWN_FILE).unlink()  # recover every partition as after a crash
    with Broker(data_dir, **CONFIG) as reopened:
        assert {key: log.log_end_offset for key, log in reopened.engine.partitions.logs()} == ends
        for _, log in reopened.engine.partitions.logs():
            for _, stored in log.batches():
                validate_batch(stored)
