"""Hostile frames on the Kafka port: no count or length a client writes makes the broker
allocate beyond the frame, a null where the schema allows none is refused before a
handler sees it, unknown tagged fields are skipped as Kafka skips them, record batches
that lie inside are answered with their partition's error, ApiVersions v3+ validates
the client's software name and version as Kafka does, and a response mapping with a
key no version of the message has is a bug caught at build time."""

from __future__ import annotations

import logging
import random
import struct
import tracemalloc
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from exactly.app.kafka import wire
from exactly.app.engine import read_models
from exactly.app.kafka.api import ApiKey
from exactly.app.kafka.codec import MalformedRequestError, decode_request, read_head
from exactly.app.kafka.prescan import prescan
from exactly.storage.errors import CorruptMessageError, InvalidRecordError, UnsupportedCompressionTypeError
from exactly.storage.record_batch import (
    CRC_OFFSET,
    HEADER_SIZE,
    SimpleRecord,
    compute_crc,
    decode_batch,
    encode_batch,
    scan_batch,
)
from exactly.storage.varint import encode_uvarint
from tests.kafka_fuzz import HOSTILE, RequestWriter, ServedBroker, broken_batches, served
from tests.kafka_support import SOFTWARE, KafkaBroker, raw_connection
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)
SERVER_LOG = "exactly.app.kafka.server"
#: ``ff ff ff ff 0f``: a compact array of 2^32 - 2 elements (compact counts are n + 1)
HUGE_COMPACT = encode_uvarint(2**32 - 1)


def frame_of(api_key: int, version: int, body: bytes, client_id: bytes = b"x") -> bytes:
    """A request frame (header v2: the APIs below are all flexible) around ``body``."""
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id + b"\x00"
    return struct.pack(">i", len(header + body)) + header + body


#: the smallest bodies that reach a compact array count: 22 to 28 bytes in all
HUGE_ARRAYS = {
    "Produce v9": frame_of(ApiKey.PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 1000) + HUGE_COMPACT),
    "FindCoordinator v4": frame_of(ApiKey.FIND_COORDINATOR, 4, b"\x00" + HUGE_COMPACT),
    "DescribeTransactions v0": frame_of(ApiKey.DESCRIBE_TRANSACTIONS, 0, HUGE_COMPACT),
    "ListTransactions v1": frame_of(ApiKey.LIST_TRANSACTIONS, 1, HUGE_COMPACT),
}


@pytest.fixture(scope="module")
def served_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedBroker]:
    """A broker in a process of its own: on the unguarded code, these frames abort it."""
    broker = ServedBroker(tmp_path_factory.mktemp("guard") / "data")
    broker.start()
    yield broker
    broker.stop(kill=True)


@pytest.mark.parametrize("what", HUGE_ARRAYS)
def test_a_tiny_frame_claiming_billions_of_elements_closes_only_its_connection(
        served_broker: ServedBroker, what: str) -> None:
    frame = HUGE_ARRAYS[what]
    assert len(frame) <= 28
    bad = raw_connection(served_broker.port, client_id="x")
    bad.sock.sendall(frame)
    assert bad.closed_by_peer()
    assert served_broker.alive, served_broker.log()
    assert eventually(lambda: "4294967294 elements claimed" in served_broker.log(), what="the log line")
    assert served_broker.memory_kb()[1] < 1_000_000, "a peak RSS of a GB or more"
    other = raw_connection(served_broker.port)
    assert other.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0
    other.close()


@pytest.mark.parametrize("api_key, version", served())
def test_the_prescan_walks_exactly_what_kio_reads(api_key: int, version: int) -> None:
    """The pre-scan's reading of the schema (compact or legacy, nullable or not, the
    header's legacy ClientId) ends each valid request where kio's reader does."""
    cls = load_request_schema(api_key, version)
    for seed in range(5):
        frame = RequestWriter(random.Random(seed)).request(api_key, version, correlation_id=seed).frame[4:]
        header_end, same = prescan(cls.__header_schema__, frame, 0)
        body_end, _ = prescan(cls, frame, header_end)
        assert same is frame and body_end == len(frame)
        _, kio_header_end = entity_reader(cls.__header_schema__)(memoryview(frame), 0)
        assert header_end == kio_header_end
        assert entity_reader(cls)(memoryview(frame), header_end)[1] == body_end - header_end


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(served()), st.integers(0, 2**32), st.data())
def test_any_length_or_count_in_any_request_decodes_or_is_malformed(served_version: tuple[int, int],
                                                                    seed: int, data: st.DataObject) -> None:
    """Every length and count site of a valid request of every served API and version,
    replaced by any value its encoding can hold: never anything but a decoded request or
    MalformedRequestError (an unguarded huge count aborts this very process)."""
    request = RequestWriter(random.Random(seed)).request(*served_version, correlation_id=1)
    site = data.draw(st.sampled_from([s for s in request.sites if s.kind != "tags"]))
    value = data.draw(st.one_of(st.sampled_from(HOSTILE[site.encoding]), {
        "uvarint": st.integers(0, 2**32 - 1), "int16": st.integers(-(2**15), 2**15 - 1),
        "int32": st.integers(-(2**31), 2**31 - 1)}[site.encoding]))
    prefix = encode_uvarint(value) if site.encoding == "uvarint" else struct.pack(
        ">h" if site.encoding == "int16" else ">i", value)
    frame = request.frame[4:site.offset] + prefix + request.frame[site.start:]
    try:
        decode_request(frame, read_head(frame))
    except MalformedRequestError:
        pass


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them(kafka: KafkaBroker) -> None:
    """A newer client may tag fields this version does not know; Kafka reads past them."""
    unknown = b"\x02" + encode_uvarint(500) + b"\x01z" + encode_uvarint(9000) + b"\x03abc"
    header = struct.pack(">hhih", ApiKey.FIND_COORDINATOR, 4, 12, 1) + b"x" + unknown
    body = b"\x01" + b"\x02" + b"\x03tx" + unknown  # transactions, one key "tx"
    client = raw_connection(kafka.port)
    client.sock.sendall(struct.pack(">i", len(header + body)) + header + body)
    correlation_id, response = client.receive(ApiKey.FIND_COORDINATOR, 4)
    assert correlation_id == 12
    assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [("tx", 0, kafka.port)]


def test_a_null_where_the_schema_allows_none_is_refused_before_the_handler(kafka: KafkaBroker, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    client = raw_connection(kafka.port)
    client.sock.sendall(frame_of(ApiKey.PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 1000) + b"\x00\x00"))
    assert client.closed_by_peer()
    assert any("ProduceRequest.topic_data: null" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


BATCH_ERRORS = {CorruptMessageError.code, InvalidRecordError.code, UnsupportedCompressionTypeError.code}


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=80), st.booleans())
def test_a_batch_that_lies_about_its_records_allocates_no_more_than_it_holds(record_count: int, records: bytes,
                                                                             keep_records: bool) -> None:
    """Any RecordCount over any records bytes (varint lengths, counts, keys, headers), under
    a CRC that matches: the broker's batch parsers raise CORRUPT_MESSAGE or INVALID_RECORD
    or decode it, allocating on the order of the batch, never of what it claims."""
    good = encode_batch([SimpleRecord(b"v%d" % i, key=b"k", headers=[("h", b"x")]) for i in range(3)])
    body = good[HEADER_SIZE:] if keep_records else records
    batch = bytearray(good[:HEADER_SIZE] + body)
    struct.pack_into(">i", batch, 8, len(batch) - 12)                       # BatchLength
    struct.pack_into(">i", batch, HEADER_SIZE - 4, record_count)           # RecordCount
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
    for parse in (scan_batch, decode_batch):
        tracemalloc.start()
        try:
            parse(bytes(batch))
        except (CorruptMessageError, InvalidRecordError):
            pass
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < 64 * 1024, f"{parse.__name__} peaked at {peak} bytes for a {len(batch)}-byte batch"


def test_record_batches_that_lie_inside_get_their_partitions_error(kafka: KafkaBroker) -> None:
    """Record counts, lengths and varints inside a batch under a good CRC: each batch is
    refused with CORRUPT_MESSAGE, INVALID_RECORD or UNSUPPORTED_COMPRESSION_TYPE, nothing
    is appended, and the connection goes on serving."""
    kafka.broker.create_topic("t", 1)
    client = raw_connection(kafka.port)
    good = RequestWriter(random.Random(0)).batch
    for what, batch in broken_batches(good, random.Random(1)):
        response = client.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
        assert response.responses[0].partition_responses[0].error_code in BATCH_ERRORS, what
    assert kafka.broker.list_offsets("t", 0, -1) == 0
    response = client.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": good}]}]})
    assert response.responses[0].partition_responses[0].error_code == 0


# -- ApiVersions v3+: KIP-511's client software name and version ---------------------------------


@pytest.mark.parametrize("name, version", [
    ("", "1.0"), ("librdkafka", ""), ("two words", "1.0"), ("ctrl\x07", "1.0"), ("<script>", "1.0"),
    ("-leading", "1.0"), ("trailing.", "1.0"), ("ok", "1.0 beta"), ("ok", "1.0\n"), ("naïve", "1.0"),
])
def test_api_versions_v3_refuses_a_software_name_or_version_kafka_refuses(kafka: KafkaBroker, name: str,
                                                                         version: str) -> None:
    client = raw_connection(kafka.port)
    for api_version in (3, 4):
        response = client.request(ApiKey.API_VERSIONS, api_version,
                                  {"client_software_name": name, "client_software_version": version})
        assert response.error_code == 42  # INVALID_REQUEST
        assert not response.api_keys
    clients = kafka.engine.call(read_models.kafka_clients, kafka.engine)
    assert [c["client_software_name"] for c in clients] == [""]  # nothing recorded
    assert client.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0  # the connection goes on


@pytest.mark.parametrize("name, version", [("a", "1"), ("confluent-kafka-python", "2.5.0-rdkafka-2.5.0"),
                                           ("kafka.python", "2.0.2")])
def test_api_versions_v3_accepts_what_kafka_accepts(kafka: KafkaBroker, name: str, version: str) -> None:
    client = raw_connection(kafka.port)
    response = client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": name,
                                                       "client_software_version": version})
    assert response.error_code == 0 and response.api_keys


def test_api_versions_before_v3_carries_no_software_name_to_check(kafka: KafkaBroker) -> None:
    assert raw_connection(kafka.port).request(ApiKey.API_VERSIONS, 2, {}).error_code == 0


# -- strict response building ----------------------------------------------------------------------


def test_a_misspelled_key_is_an_error_not_a_silent_none() -> None:
    response = load_response_schema(ApiKey.PRODUCE, 9)
    with pytest.raises(wire.UnknownFieldError, match="eror_code"):
        wire.build(response, {"responses": [{"name": "t", "partition_responses": [{"index": 0, "eror_code": 6}]}]})
    with pytest.raises(wire.UnknownFieldError, match="throttle_tme"):
        wire.build(response, {"throttle_tme": 5})
    with pytest.raises(wire.UnknownFieldError, match="topic_dat"):
        wire.build(load_request_schema(ApiKey.PRODUCE, 9), {"acks": 1, "topic_dat": []})


def test_a_key_of_another_version_is_left_out_as_before() -> None:
    """One mapping shape for every version: ``record_errors`` (v8+) and ``log_start_offset``
    (v5+) are simply absent from Produce v3's response."""
    v3 = wire.build(load_response_schema(ApiKey.PRODUCE, 3), {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "record_errors": [], "log_start_offset": 0}]}]})
    assert not hasattr(v3.responses[0].partition_responses[0], "record_errors")
