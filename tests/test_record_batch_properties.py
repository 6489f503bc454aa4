"""Properties of the varint, compression and record-batch codecs.

Round trips (encode -> decode is the identity, every byte is consumed, the
header's size is the encoded length), corruption (any changed CRC-covered byte,
any truncation, raises), bounded decompression, and the structural checks
``decode_batch`` makes under a valid CRC, with batches forged byte by byte.
"""

from __future__ import annotations

import dataclasses
import gzip
import sys
import time

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.storage.compression import (XERIAL_CHUNK_LENGTH, XERIAL_HEADER, XERIAL_MAGIC,
                                 Compression, compress, decompress)
from exactly.storage.errors import (CorruptMessageError, InvalidRecordError,
                            UnsupportedCompressionTypeError)
from exactly.storage.record_batch import (ATTRIBUTES_OFFSET, CONTROL_BIT, CONTROL_KEY,
                                  CRC_COVERAGE_START, CRC_OFFSET, END_TXN_MARKER_VALUE, HEADER,
                                  HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, MAX_SEQUENCE,
                                  MAX_TIMESTAMP_OFFSET, PARTITION_LEADER_EPOCH_OFFSET,
                                  TIMESTAMP_TYPE_BIT, BatchHeader, ControlType, Record,
                                  SimpleRecord, compute_crc, decode_batch, decode_control_record,
                                  encode_batch, encode_end_txn_marker, iter_headers, read_header,
                                  recompress, restamp, scan_batch, validate_batch, with_base_offset,
                                  with_partition_leader_epoch)
from exactly.storage.varint import decode_uvarint, decode_varint, encode_uvarint, encode_varint

PROPERTY = settings(max_examples=200, deadline=None)
SLOW_PROPERTY = settings(max_examples=40, deadline=None)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1

# --- strategies -------------------------------------------------------------

arb_optional_bytes = st.none() | st.binary(max_size=48)
arb_header = st.tuples(st.text(max_size=8), arb_optional_bytes)
arb_timestamp = st.integers(0, 2**45)
arb_record = st.builds(SimpleRecord, value=arb_optional_bytes, key=arb_optional_bytes,
                       headers=st.lists(arb_header, max_size=3).map(tuple),
                       timestamp=arb_timestamp)
arb_records = st.lists(arb_record, min_size=1, max_size=8)
arb_compression = st.sampled_from(Compression)
arb_batch_params = st.fixed_dictionaries({
    "base_offset": st.integers(0, 2**62),
    "producer_id": st.just(-1) | st.integers(0, INT64_MAX),
    "producer_epoch": st.just(-1) | st.integers(0, 2**15 - 1),
    "base_sequence": st.just(-1) | st.integers(0, MAX_SEQUENCE),
    "transactional": st.booleans(),
    "compression": arb_compression,
    "timestamp_type": st.sampled_from([0, 1]),
    "partition_leader_epoch": st.integers(-1, INT32_MAX),
    "base_timestamp": st.none() | arb_timestamp,
})
arb_encoded_batch = st.builds(lambda records, params: encode_batch(records, **params),
                              arb_records, arb_batch_params)


# --- helpers ----------------------------------------------------------------

def with_crc(batch: bytearray) -> bytes:
    """``batch`` with its CRC field recomputed, so only structure can be wrong."""
    batch[CRC_OFFSET:ATTRIBUTES_OFFSET] = compute_crc(batch).to_bytes(4, "big")
    return bytes(batch)


def forge_record(offset_delta: int, *, key: bytes | None = None, value: bytes | None = b"v",
                 headers: list[tuple[bytes | None, bytes | None]] = (),
                 header_count: int | None = None, length_adjust: int = 0) -> bytes:
    """Record bytes built by hand, free to break the rules encode_batch keeps."""
    def field(data: bytes | None) -> bytes:
        return encode_varint(-1) if data is None else encode_varint(len(data)) + data

    body = (b"\x00" + encode_varint(0) + encode_varint(offset_delta) + field(key) + field(value)
            + encode_varint(len(headers) if header_count is None else header_count)
            + b"".join(field(k) + field(v) for k, v in headers))
    return encode_varint(len(body) + length_adjust) + body


def forge_batch(body: bytes, *, record_count: int, last_offset_delta: int,
                attributes: int = 0, magic: int = 2) -> bytes:
    """A batch with a valid CRC around an arbitrary records section."""
    batch = bytearray(HEADER.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(body), 0, magic, 0,
                                  attributes, last_offset_delta, 1000, 1000, -1, -1, -1,
                                  record_count))
    return with_crc(batch + body)


def header_with(**changes: int) -> BatchHeader:
    base = read_header(encode_batch([SimpleRecord(b"v", timestamp=1)]))
    return dataclasses.replace(base, **changes)


# --- layout -----------------------------------------------------------------

def test_layout_constants_match_the_spec_table():
    assert (HEADER_SIZE, LOG_OVERHEAD) == (61, 12)
    assert (PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET, CRC_OFFSET) == (12, 16, 17)
    assert ATTRIBUTES_OFFSET == CRC_COVERAGE_START == 21
    assert MAX_TIMESTAMP_OFFSET == 35


def test_crc32c_check_value():
    batch = bytes(CRC_COVERAGE_START) + b"123456789"
    assert compute_crc(batch) == 0xE3069283


# --- varint -----------------------------------------------------------------

@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (63, "7e"), (64, "8001"), (-65, "8101"),
    (INT32_MAX, "feffffff0f"), (INT32_MIN, "ffffffff0f"),
    (INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01"),
])
def test_varint_known_encodings(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@PROPERTY
@given(value=st.integers(INT64_MIN, INT64_MAX), prefix=st.binary(max_size=4),
       suffix=st.binary(max_size=4))
def test_varint_round_trips_at_any_position(value, prefix, suffix):
    encoded = encode_varint(value)
    assert len(encoded) <= 10
    assert decode_varint(prefix + encoded + suffix, len(prefix)) == (
        value, len(prefix) + len(encoded))


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varint_refuses_values_outside_int64(value):
    with pytest.raises(ValueError):
        encode_varint(value)


@PROPERTY
@given(value=st.integers(INT64_MIN, INT64_MAX).filter(lambda v: not -64 <= v < 64))
def test_truncated_varint_raises(value):
    encoded = encode_varint(value)
    for cut in range(len(encoded)):
        with pytest.raises(InvalidRecordError):
            decode_varint(encoded[:cut], 0)


@pytest.mark.parametrize("encoded", [
    "80" * 10 + "00",              # eleven bytes
    "ff" * 9 + "7f",               # ten bytes, but more than 64 bits
])
def test_overlong_varint_raises(encoded):
    with pytest.raises(InvalidRecordError):
        decode_varint(bytes.fromhex(encoded), 0)


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (UINT32_MAX, "ffffffff0f"),
])
def test_uvarint_known_encodings(value, encoded):
    assert encode_uvarint(value).hex() == encoded
    assert decode_uvarint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@PROPERTY
@given(value=st.integers(0, UINT32_MAX), prefix=st.binary(max_size=4))
def test_uvarint_round_trips(value, prefix):
    encoded = encode_uvarint(value)
    assert decode_uvarint(prefix + encoded, len(prefix)) == (value, len(prefix) + len(encoded))


@pytest.mark.parametrize("value", [-1, UINT32_MAX + 1])
def test_uvarint_refuses_values_outside_uint32(value):
    with pytest.raises(ValueError):
        encode_uvarint(value)


@pytest.mark.parametrize("encoded", ["", "80", "ffff", "8080808080", "ffffffff1f", "808080808000"])
def test_bad_uvarint_raises(encoded):
    with pytest.raises(InvalidRecordError):
        decode_uvarint(bytes.fromhex(encoded), 0)


# --- compression ------------------------------------------------------------

@SLOW_PROPERTY
@given(codec=arb_compression, data=st.binary(max_size=4096) | st.text(max_size=2000).map(
    lambda text: (text * 20).encode()))
def test_compression_round_trips(codec, data):
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(b"xx" + compress(codec, data))[2:]) == data


def test_snappy_writes_xerial_chunks_of_32_kib():
    data = bytes(range(256)) * 300  # 76,800 bytes: three chunks
    stream = compress(Compression.SNAPPY, data)
    assert XERIAL_HEADER.unpack_from(stream) == (XERIAL_MAGIC, 1, 1)
    pos, chunks = XERIAL_HEADER.size, []
    while pos < len(stream):
        (length,) = XERIAL_CHUNK_LENGTH.unpack_from(stream, pos)
        pos += XERIAL_CHUNK_LENGTH.size
        chunks.append(bytes(cramjam.snappy.decompress_raw(stream[pos:pos + length])))
        pos += length
    assert [len(chunk) for chunk in chunks] == [32768, 32768, 11264]
    assert b"".join(chunks) == data


@PROPERTY
@given(data=st.binary(max_size=2048))
def test_snappy_reads_raw_blocks(data):
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


def test_lz4_frames_use_independent_blocks_as_kafka_requires():
    frame = compress(Compression.LZ4, b"kafka" * 1000)
    assert frame[:4] == bytes.fromhex("04224d18")
    flags = frame[4]
    assert flags >> 6 == 1            # frame version 01
    assert flags & 0x20               # block independence: Kafka rejects linked blocks


@pytest.mark.parametrize("codec", list(Compression))
def test_decompressing_past_max_size_raises_invalid_record(codec):
    bomb = compress(codec, bytes(4 * 1024 * 1024))
    assert decompress(codec, bomb, max_size=4 * 1024 * 1024) == bytes(4 * 1024 * 1024)
    with pytest.raises(InvalidRecordError, match="more than"):
        decompress(codec, bomb, max_size=1024 * 1024)


def test_gzip_bomb_is_stopped_at_max_size():
    bomb = gzip.compress(bytes(200 * 1024 * 1024))
    assert len(bomb) < 1024 * 1024
    with pytest.raises(InvalidRecordError):
        decompress(Compression.GZIP, bomb)


def test_gzip_reads_concatenated_members_and_rejects_a_cut_one():
    stream = compress(Compression.GZIP, b"first ") + compress(Compression.GZIP, b"second")
    assert decompress(Compression.GZIP, stream) == b"first second"
    with pytest.raises(CorruptMessageError):
        decompress(Compression.GZIP, stream[:-3])


@PROPERTY
@given(codec=arb_compression, data=st.binary(max_size=512))
def test_decompressing_garbage_raises_only_kafka_errors(codec, data):
    try:
        decompress(codec, data, max_size=1 << 20)
    except (CorruptMessageError, InvalidRecordError):
        pass


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_missing_cramjam_names_the_extra_to_install(codec, monkeypatch):
    monkeypatch.setitem(sys.modules, "cramjam", None)
    install_hint = r"pip install exactly\[compression\]"
    with pytest.raises(UnsupportedCompressionTypeError, match=install_hint):
        compress(codec, b"data")
    with pytest.raises(UnsupportedCompressionTypeError, match=codec.name.lower()):
        decompress(codec, b"data")


# --- record batch round trips -----------------------------------------------

@PROPERTY
@given(records=arb_records, params=arb_batch_params)
def test_encode_decode_round_trip(records, params):
    encoded = encode_batch(records, **params)
    batch = decode_batch(encoded)
    header = batch.header
    assert len(encoded) == header.size
    assert header.magic == 2
    assert header.base_offset == params["base_offset"]
    assert header.producer_id == params["producer_id"]
    assert header.producer_epoch == params["producer_epoch"]
    assert header.base_sequence == params["base_sequence"]
    assert header.is_transactional is params["transactional"]
    assert header.is_control is False
    assert header.compression is params["compression"]
    assert header.timestamp_type == params["timestamp_type"]
    assert header.partition_leader_epoch == params["partition_leader_epoch"]
    assert header.record_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.next_offset == params["base_offset"] + len(records)
    timestamps = [r.timestamp for r in records]
    assert header.base_timestamp == (params["base_timestamp"] if params["base_timestamp"]
                                     is not None else timestamps[0])
    assert header.max_timestamp == max(timestamps)
    log_append = params["timestamp_type"] == 1
    assert batch.records == tuple(
        Record(params["base_offset"] + i, header.max_timestamp if log_append else r.timestamp,
               r.key, r.value, tuple(r.headers))
        for i, r in enumerate(records))


@PROPERTY
@given(records=arb_records, params=arb_batch_params, target=arb_compression)
def test_recompress_changes_only_the_codec(records, params, target):
    """A topic's compression.type: the same records, offsets and producer fields in
    another codec, with a valid CRC and the length it says."""
    encoded = encode_batch(records, **params)
    before = decode_batch(encoded)
    recompressed = recompress(encoded, target)
    after = decode_batch(recompressed)  # verifies the CRC
    assert after.header.compression is target and after.header.size == len(recompressed)
    assert after.records == before.records
    unchanged = ("base_offset", "producer_id", "producer_epoch", "base_sequence", "is_transactional",
                 "timestamp_type", "partition_leader_epoch", "record_count", "last_offset_delta",
                 "base_timestamp", "max_timestamp")
    assert [getattr(after.header, f) for f in unchanged] == [getattr(before.header, f) for f in unchanged]
    assert (recompressed == encoded) is (params["compression"] is target)


@PROPERTY
@given(records=arb_records)
def test_tuple_records_encode_like_simple_records(records):
    as_tuples = [(r.key, r.value, r.headers, r.timestamp) for r in records]
    assert encode_batch(as_tuples) == encode_batch(records)


def test_missing_timestamps_mean_now():
    before = time.time_ns() // 1_000_000
    batch = decode_batch(encode_batch([SimpleRecord(b"a"), (None, b"b", (), None)]))
    after = time.time_ns() // 1_000_000
    assert all(before <= r.timestamp <= after for r in batch.records)


def test_encode_refuses_empty_and_multi_record_control_batches():
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch([SimpleRecord(b"a"), SimpleRecord(b"b")], control=True)


# --- corruption -------------------------------------------------------------

@PROPERTY
@given(encoded=arb_encoded_batch, data=st.data())
def test_changing_any_crc_covered_or_crc_byte_is_corrupt(encoded, data):
    index = data.draw(st.integers(CRC_OFFSET, len(encoded) - 1), label="index")
    mask = data.draw(st.integers(1, 255), label="xor mask")
    corrupted = bytearray(encoded)
    corrupted[index] ^= mask
    with pytest.raises(CorruptMessageError):
        decode_batch(bytes(corrupted))


@PROPERTY
@given(encoded=arb_encoded_batch, data=st.data())
def test_changing_batch_length_or_magic_raises(encoded, data):
    index = data.draw(st.sampled_from([8, 9, 10, 11, MAGIC_OFFSET]), label="index")
    corrupted = bytearray(encoded)
    corrupted[index] ^= data.draw(st.integers(1, 255), label="xor mask")
    with pytest.raises(InvalidRecordError if index == MAGIC_OFFSET else CorruptMessageError):
        decode_batch(bytes(corrupted))


@PROPERTY
@given(encoded=arb_encoded_batch, data=st.data())
def test_truncated_or_extended_batches_raise(encoded, data):
    cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
    with pytest.raises(CorruptMessageError):
        decode_batch(encoded[:cut])
    assert list(iter_headers(encoded[:cut])) == []
    with pytest.raises(CorruptMessageError):
        decode_batch(encoded + b"\x00")


@PROPERTY
@given(encoded=arb_encoded_batch, data=st.data())
def test_unchecked_decode_of_damaged_records_raises_only_kafka_errors(encoded, data):
    damaged = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        damaged[data.draw(st.integers(HEADER_SIZE, len(encoded) - 1))] ^= data.draw(
            st.integers(1, 255))
    try:
        decode_batch(bytes(damaged), verify_crc=False)
    except (CorruptMessageError, InvalidRecordError):
        pass


def test_decode_refuses_records_that_inflate_past_the_limit():
    encoded = encode_batch([SimpleRecord(bytes(100_000), timestamp=0)],
                           compression=Compression.GZIP)
    assert decode_batch(encoded).records[0].value == bytes(100_000)
    with pytest.raises(InvalidRecordError):
        decode_batch(encoded, max_uncompressed=50_000)


# --- structure under a valid CRC --------------------------------------------

def test_forged_batch_helper_builds_a_valid_batch():
    body = forge_record(0, key=b"k", headers=[(b"h", None)]) + forge_record(2)
    batch = decode_batch(forge_batch(body, record_count=2, last_offset_delta=2))
    assert [(r.offset, r.key, r.value, r.headers) for r in batch.records] == [
        (0, b"k", b"v", (("h", None),)), (2, None, b"v", ())]


def test_empty_batch_left_by_compaction_decodes_to_no_records():
    assert decode_batch(forge_batch(b"", record_count=0, last_offset_delta=4)).records == ()


def test_a_batch_whose_last_records_compaction_removed_decodes():
    """The log cleaner keeps LastOffsetDelta (the batch's offset and sequence range)
    when it removes the last records, so the last record may end before it."""
    batch = forge_batch(forge_record(0) + forge_record(1), record_count=2, last_offset_delta=3)
    assert [r.offset for r in decode_batch(batch).records] == [0, 1]
    assert scan_batch(batch)[0].last_offset_delta == 3


@pytest.mark.parametrize("body, record_count, last_offset_delta", [
    pytest.param(forge_record(0), 2, 1, id="fewer-records-than-counted"),
    pytest.param(forge_record(0) + forge_record(1), 1, 0, id="bytes-left-after-the-count"),
    pytest.param(forge_record(0) + forge_record(1), 2, 0, id="record-past-last-offset-delta"),
    pytest.param(forge_record(0) + forge_record(0), 2, 0, id="repeated-offset-delta"),
    pytest.param(forge_record(1) + forge_record(0), 2, 0, id="decreasing-offset-deltas"),
    pytest.param(forge_record(-1), 1, -1, id="negative-offset-delta"),
    pytest.param(forge_record(0, length_adjust=1), 1, 0, id="length-runs-past-the-data"),
    pytest.param(forge_record(0, length_adjust=-1) + b"\x00", 1, 0,
                 id="fields-run-past-the-length"),
    pytest.param(forge_record(0, key=b"k", length_adjust=1) + b"\x00", 1, 0,
                 id="length-past-the-fields"),
    pytest.param(forge_record(0, value=None, length_adjust=-1), 1, 0,
                 id="header-count-past-the-length"),
    pytest.param(encode_varint(0), 1, 0, id="zero-length-record"),
    pytest.param(forge_record(0, header_count=-1), 1, 0, id="negative-header-count"),
    pytest.param(forge_record(0, header_count=3), 1, 0, id="headers-missing"),
    pytest.param(forge_record(0, headers=[(None, b"x")]), 1, 0, id="null-header-key"),
    pytest.param(forge_record(0, headers=[(b"\xff", b"x")]), 1, 0, id="header-key-not-utf-8"),
    pytest.param(b"\x80", 1, 0, id="varint-cut-off"),
    pytest.param(b"", -1, 0, id="negative-record-count"),
])
def test_structural_faults_under_a_valid_crc_are_invalid_records(body, record_count,
                                                                 last_offset_delta):
    batch = forge_batch(body, record_count=record_count, last_offset_delta=last_offset_delta)
    validate_batch(batch)
    with pytest.raises(InvalidRecordError):
        decode_batch(batch)


def test_value_length_below_minus_one_is_invalid():
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(-2)
    body += encode_varint(0)
    batch = forge_batch(encode_varint(len(body)) + body, record_count=1, last_offset_delta=0)
    with pytest.raises(InvalidRecordError, match="negative length"):
        decode_batch(batch)


@pytest.mark.parametrize("record_count", [0, 2])
def test_control_batch_must_hold_exactly_one_record(record_count):
    body = b"".join(forge_record(i) for i in range(record_count))
    batch = forge_batch(body, record_count=record_count, last_offset_delta=max(record_count - 1, 0),
                        attributes=CONTROL_BIT)
    with pytest.raises(InvalidRecordError, match="control batch"):
        decode_batch(batch)


def test_wrong_magic_is_an_invalid_record():
    batch = forge_batch(forge_record(0), record_count=1, last_offset_delta=0, magic=1)
    with pytest.raises(InvalidRecordError, match="magic"):
        read_header(batch)
    with pytest.raises(InvalidRecordError, match="magic"):
        list(iter_headers(batch))


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_compression_id_is_an_invalid_record(codec_id):
    batch = forge_batch(forge_record(0), record_count=1, last_offset_delta=0, attributes=codec_id)
    with pytest.raises(InvalidRecordError, match="compression"):
        decode_batch(batch)


def test_short_header_and_short_batch_length_are_corrupt():
    batch = encode_batch([SimpleRecord(b"v", timestamp=0)])
    with pytest.raises(CorruptMessageError):
        read_header(batch[:HEADER_SIZE - 1])
    too_short = bytearray(batch)
    too_short[8:12] = (HEADER_SIZE - LOG_OVERHEAD - 1).to_bytes(4, "big")
    with pytest.raises(CorruptMessageError, match="BatchLength"):
        read_header(too_short)


# --- header fields ----------------------------------------------------------

@pytest.mark.parametrize("base_sequence, last_offset_delta, last_sequence", [
    (-1, 5, -1), (0, 0, 0), (0, 4, 4), (MAX_SEQUENCE - 2, 2, MAX_SEQUENCE),
    (MAX_SEQUENCE - 1, 3, 1), (MAX_SEQUENCE, 1, 0), (MAX_SEQUENCE, 0, MAX_SEQUENCE),
])
def test_last_sequence_wraps_like_kafka(base_sequence, last_offset_delta, last_sequence):
    header = header_with(base_sequence=base_sequence, last_offset_delta=last_offset_delta)
    assert header.last_sequence == last_sequence


def test_header_flag_properties():
    header = header_with(base_offset=10, last_offset_delta=4, attributes=0x3B, producer_id=0,
                         batch_length=100)
    assert (header.size, header.last_offset, header.next_offset) == (112, 14, 15)
    assert header.compression is Compression.LZ4
    assert header.timestamp_type == 1
    assert header.is_transactional and header.is_control and header.has_producer_id
    plain = header_with(attributes=0, producer_id=-1)
    assert not (plain.is_transactional or plain.is_control or plain.has_producer_id)
    assert (plain.timestamp_type, plain.compression) == (0, Compression.NONE)


# --- header rewrites --------------------------------------------------------

@PROPERTY
@given(encoded=arb_encoded_batch, base_offset=st.integers(0, 2**62),
       epoch=st.integers(-1, INT32_MAX))
def test_rewriting_base_offset_and_leader_epoch_keeps_the_crc(encoded, base_offset, epoch):
    rewritten = with_partition_leader_epoch(with_base_offset(encoded, base_offset), epoch)
    assert rewritten[CRC_OFFSET:] == encoded[CRC_OFFSET:]
    assert rewritten[8:12] == encoded[8:12]
    original = decode_batch(encoded)
    batch = decode_batch(rewritten)
    assert batch.header == dataclasses.replace(original.header, base_offset=base_offset,
                                               partition_leader_epoch=epoch)
    shift = base_offset - original.header.base_offset
    assert [r.offset for r in batch.records] == [r.offset + shift for r in original.records]


def test_rewrites_refuse_out_of_range_values():
    encoded = encode_batch([SimpleRecord(b"v", timestamp=0)])
    with pytest.raises(ValueError):
        with_base_offset(encoded, 2**63)
    with pytest.raises(ValueError):
        with_partition_leader_epoch(encoded, 2**31)


@PROPERTY
@given(encoded=arb_encoded_batch, append_time=arb_timestamp)
def test_restamping_log_append_time_rewrites_the_crc(encoded, append_time):
    original = decode_batch(encoded)
    attributes = original.header.attributes | TIMESTAMP_TYPE_BIT
    stamped = decode_batch(restamp(encoded, attributes=attributes, max_timestamp=append_time))
    assert stamped.header == dataclasses.replace(
        original.header, attributes=attributes, max_timestamp=append_time,
        crc=stamped.header.crc)
    assert {r.timestamp for r in stamped.records} == {append_time}
    assert ([dataclasses.replace(r, timestamp=0) for r in stamped.records]
            == [dataclasses.replace(r, timestamp=0) for r in original.records])


def test_restamping_back_to_create_time_restores_the_original_bytes():
    encoded = encode_batch([SimpleRecord(b"a", timestamp=5), SimpleRecord(b"b", timestamp=9)])
    stamped = restamp(encoded, attributes=TIMESTAMP_TYPE_BIT, max_timestamp=100)
    assert restamp(stamped, attributes=0, max_timestamp=9) == encoded


def test_restamp_refuses_other_attribute_bits_and_a_bad_crc():
    encoded = encode_batch([SimpleRecord(b"v", timestamp=0)])
    with pytest.raises(ValueError, match="timestamp-type"):
        restamp(encoded, attributes=Compression.GZIP, max_timestamp=0)
    damaged = bytearray(encoded)
    damaged[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        restamp(bytes(damaged), attributes=TIMESTAMP_TYPE_BIT, max_timestamp=0)


# --- control records --------------------------------------------------------

@PROPERTY
@given(producer_id=st.integers(0, INT64_MAX), producer_epoch=st.integers(0, 2**15 - 1),
       coordinator_epoch=st.integers(0, INT32_MAX), commit=st.booleans(),
       timestamp=arb_timestamp, base_offset=st.integers(0, 2**62))
def test_end_txn_marker_round_trip(producer_id, producer_epoch, coordinator_epoch, commit,
                                   timestamp, base_offset):
    marker = encode_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                   timestamp, base_offset=base_offset)
    assert len(marker) == 78
    batch = decode_batch(marker)
    header = batch.header
    assert header.attributes == 0x30
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert (header.base_sequence, header.record_count, header.last_offset_delta) == (-1, 1, 0)
    assert header.base_timestamp == header.max_timestamp == timestamp
    (record,) = batch.records
    assert record.offset == base_offset and record.headers == ()
    want = ControlType.COMMIT if commit else ControlType.ABORT
    assert decode_control_record(record) == (want, coordinator_epoch)


def control_record(key: bytes | None, value: bytes | None) -> Record:
    return Record(offset=0, timestamp=0, key=key, value=value, headers=())


def test_control_record_of_a_newer_key_version_parses_as_v0():
    record = control_record(CONTROL_KEY.pack(3, 1) + b"extra", END_TXN_MARKER_VALUE.pack(0, 9))
    assert decode_control_record(record) == (ControlType.COMMIT, 9)


def test_control_record_types_abort_0_commit_1():
    assert (ControlType.ABORT, ControlType.COMMIT) == (0, 1)
    abort = control_record(CONTROL_KEY.pack(0, 0), END_TXN_MARKER_VALUE.pack(0, 5))
    assert decode_control_record(abort) == (ControlType.ABORT, 5)


def test_unknown_control_type_comes_back_as_an_int():
    result = decode_control_record(control_record(CONTROL_KEY.pack(0, 2), b"whatever"))
    assert result == (2, None)
    assert not isinstance(result[0], ControlType)


@pytest.mark.parametrize("key, value", [
    (None, END_TXN_MARKER_VALUE.pack(0, 1)),
    (b"\x00\x00\x00", END_TXN_MARKER_VALUE.pack(0, 1)),
    (CONTROL_KEY.pack(-1, 1), END_TXN_MARKER_VALUE.pack(0, 1)),
    (CONTROL_KEY.pack(0, 1), None),
    (CONTROL_KEY.pack(0, 0), b"\x00\x00\x00\x00\x00"),
    (CONTROL_KEY.pack(0, 1), END_TXN_MARKER_VALUE.pack(-1, 1)),
])
def test_malformed_control_records_are_invalid(key, value):
    with pytest.raises(InvalidRecordError):
        decode_control_record(control_record(key, value))


# --- walking concatenated batches -------------------------------------------

@PROPERTY
@given(batches=st.lists(arb_encoded_batch, min_size=1, max_size=4), data=st.data())
def test_iter_headers_yields_each_whole_batch_and_ignores_a_partial_tail(batches, data):
    tail = data.draw(st.sampled_from(batches), label="tail batch")
    partial = tail[:data.draw(st.integers(0, len(tail) - 1), label="partial length")]
    buffer = b"".join(batches) + partial
    walked = list(iter_headers(buffer))
    positions = [sum(map(len, batches[:i])) for i in range(len(batches))]
    assert [pos for pos, _ in walked] == positions
    assert [header for _, header in walked] == [read_header(b) for b in batches]
    for (pos, header), batch in zip(walked, batches):
        assert decode_batch(memoryview(buffer)[pos:pos + header.size]) == decode_batch(batch)


# --- scan_batch: the broker's validate-only walk agrees with decode_batch ------

def _outcome(fn, batch):
    try:
        return fn(batch)
    except (CorruptMessageError, InvalidRecordError) as exc:
        return type(exc)


def _scan_says(batch):
    header, max_timestamp = scan_batch(batch, verify_crc=False)
    return header, max_timestamp


def _decode_says(batch):
    decoded = decode_batch(batch, verify_crc=False)
    return decoded.header, max((r.timestamp for r in decoded.records), default=-1)


arb_sized_bytes = st.none() | st.integers(0, 20_000).map(bytes)  # 1-, 2- and 3-byte varint lengths
arb_big_record = st.builds(SimpleRecord, value=arb_sized_bytes, key=arb_sized_bytes,
                           headers=st.lists(arb_header, max_size=2).map(tuple),
                           timestamp=arb_timestamp)


@PROPERTY
@given(records=st.lists(arb_record | arb_big_record, min_size=1, max_size=20),
       params=arb_batch_params)
def test_scan_batch_reports_the_max_record_timestamp(records, params):
    params = {**params, "timestamp_type": 0}
    encoded = encode_batch(records, **params)
    header, max_timestamp = scan_batch(encoded)
    assert header == read_header(encoded)
    assert max_timestamp == max(r.timestamp for r in decode_batch(encoded).records)


@PROPERTY
@given(encoded=arb_encoded_batch | st.builds(lambda records, params: encode_batch(records, **params),
                                            st.lists(arb_big_record, min_size=1, max_size=4),
                                            arb_batch_params),
       data=st.data())
def test_scan_batch_accepts_and_rejects_exactly_what_decode_batch_does(encoded, data):
    damaged = bytearray(encoded)
    for _ in range(data.draw(st.integers(0, 4), label="flips")):
        damaged[data.draw(st.integers(HEADER_SIZE, len(encoded) - 1))] ^= data.draw(
            st.integers(1, 255))
    scanned, decoded = _outcome(_scan_says, bytes(damaged)), _outcome(_decode_says, bytes(damaged))
    if isinstance(decoded, type):
        assert scanned is decoded
    elif read_header(bytes(damaged)).timestamp_type == 0:
        assert scanned == decoded


@pytest.mark.parametrize("body, record_count, last_offset_delta", [
    (forge_record(0), 2, 1), (forge_record(0) + forge_record(1), 1, 0),
    (forge_record(0) + forge_record(1), 2, 0), (forge_record(0) + forge_record(0), 2, 0),
    (forge_record(1) + forge_record(0), 2, 0), (forge_record(-1), 1, -1),
    (forge_record(0, length_adjust=1), 1, 0), (forge_record(0, length_adjust=-1) + b"\x00", 1, 0),
    (forge_record(0, key=b"k", length_adjust=1) + b"\x00", 1, 0),
    (forge_record(0, value=None, length_adjust=-1), 1, 0), (encode_varint(0), 1, 0),
    (forge_record(0, header_count=-1), 1, 0), (forge_record(0, header_count=3), 1, 0),
    (forge_record(0, headers=[(None, b"x")]), 1, 0), (forge_record(0, headers=[(b"\xff", b"x")]), 1, 0),
    (b"\x80", 1, 0), (forge_record(0, key=b"k" * 200, value=b"v" * 300, length_adjust=2), 1, 0),
])
def test_scan_batch_rejects_every_structural_fault(body, record_count, last_offset_delta):
    batch = forge_batch(body, record_count=record_count, last_offset_delta=last_offset_delta)
    with pytest.raises(InvalidRecordError):
        scan_batch(batch)
