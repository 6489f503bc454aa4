"""The record-batch codec against byte-exact batches from independent encoders.

Inputs are ``tests/data/record_batches/`` (written by kafka-python's record builder;
see the README there) and the COMMIT marker printed in ``docs/formats.md`` ("Control
records"). A missing vector directory fails these tests rather than skipping them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from exactly.storage.compression import Compression
from exactly.storage.errors import CorruptMessageError
from exactly.storage.record_batch import (ControlType, RecordBatch, SimpleRecord, decode_batch,
                                  decode_control_record, encode_batch, encode_end_txn_marker,
                                  iter_headers, read_header, validate_batch)

VECTORS = Path(__file__).resolve().parent / "data" / "record_batches"
SEGMENT = "segment_00000000000000000000.log"

# The valid batches, in the order the segment holds them (README table).
VALID = (
    "plain_3_records_with_headers",
    "idempotent_pid1000_epoch0_seq0",
    "transactional_pid1000_epoch3_seq10",
    "gzip_idempotent_pid7_epoch1_seq5",
    "control_commit_pid1000_epoch3_coordepoch2",
    "control_abort_pid1000_epoch4_coordepoch2",
)
UNCOMPRESSED = tuple(name for name in VALID if not name.startswith("gzip"))
CORRUPT = "corrupt_crc_plain"

# docs/formats.md, "Control records": COMMIT, base offset 42, leader epoch 0, producer 1000,
# epoch 3, timestamps 1700000000000, coordinator epoch 0, CRC 0xd75fc58e.
SPEC_COMMIT_MARKER = bytes.fromhex(
    "00000000000000 2a 00000042 00000000 02 d75fc58e 0030 00000000"
    "0000018bcfe56800 0000018bcfe56800 00000000000003e8 0003 ffffffff 00000001"
    "20 00 00 00 08 00000001 0c 000000000000 00")


def expected(name: str) -> dict:
    return json.loads((VECTORS / "vectors.json").read_text())[name]


def vector_bytes(name: str) -> bytes:
    return (VECTORS / f"{name}.bin").read_bytes()


def optional_hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def reencode(batch: RecordBatch, compression: Compression) -> bytes:
    """``batch``'s records encoded again with its own header parameters."""
    header = batch.header
    records = [SimpleRecord(r.value, r.key, r.headers, r.timestamp) for r in batch.records]
    return encode_batch(records, base_offset=header.base_offset,
                        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                        base_sequence=header.base_sequence,
                        transactional=header.is_transactional, control=header.is_control,
                        compression=compression, timestamp_type=header.timestamp_type,
                        partition_leader_epoch=header.partition_leader_epoch,
                        base_timestamp=header.base_timestamp)


def test_vector_directory_holds_exactly_the_known_vectors():
    names = {path.stem for path in VECTORS.glob("*.bin")}
    assert names == set(VALID) | {CORRUPT}
    assert set(json.loads((VECTORS / "vectors.json").read_text())) == names


@pytest.mark.parametrize("name", VALID + (CORRUPT,))
def test_vector_file_matches_its_json_hex(name):
    assert vector_bytes(name).hex() == expected(name)["hex"]


@pytest.mark.parametrize("name", VALID)
def test_decode_reports_every_expected_field(name):
    want = expected(name)
    data = vector_bytes(name)
    batch = decode_batch(data)
    header = batch.header
    assert header.base_offset == want["base_offset"]
    assert header.batch_length == want["batch_length_field"]
    assert header.size == want["size_in_bytes"] == len(data)
    assert header.magic == want["magic"]
    assert header.crc == want["crc"]
    assert header.attributes == want["attributes"]
    assert header.compression == want["compression"]
    assert header.is_transactional is want["is_transactional"]
    assert header.is_control is want["is_control"]
    assert header.last_offset_delta == want["last_offset_delta"]
    assert header.producer_id == want["producer_id"]
    assert header.producer_epoch == want["producer_epoch"]
    assert header.base_sequence == want["base_sequence"]
    assert header.record_count == want["record_count"]
    got_records = [
        {"offset": r.offset, "timestamp": r.timestamp, "key": optional_hex(r.key),
         "value": optional_hex(r.value),
         "headers": [[k, optional_hex(v)] for k, v in r.headers]}
        for r in batch.records]
    assert got_records == want["records"]


@pytest.mark.parametrize("name", VALID)
def test_read_header_and_validate_agree_with_decode(name):
    data = vector_bytes(name)
    assert read_header(data) == validate_batch(data) == decode_batch(data).header


def test_corrupt_crc_vector_is_rejected():
    data = vector_bytes(CORRUPT)
    plain = vector_bytes("plain_3_records_with_headers")
    assert len(data) == len(plain)
    assert sum(a != b for a, b in zip(data, plain)) == 1
    with pytest.raises(CorruptMessageError, match="CRC"):
        validate_batch(data)
    with pytest.raises(CorruptMessageError, match="CRC"):
        decode_batch(data)


def test_segment_walks_to_the_six_batches_at_offsets_0_to_19():
    segment = (VECTORS / SEGMENT).read_bytes()
    walked = list(iter_headers(segment))
    assert [header.base_offset for _, header in walked] == [0, 3, 8, 12, 18, 19]
    offsets = []
    position = 0
    for (pos, header), name in zip(walked, VALID, strict=True):
        assert pos == position
        data = segment[pos:pos + header.size]
        assert data == vector_bytes(name)
        offsets += [record.offset for record in decode_batch(data).records]
        position += header.size
    assert position == len(segment)
    assert offsets == list(range(20))
    assert walked[-1][1].next_offset == 20


def test_segment_walk_stops_silently_at_a_partial_trailing_batch():
    segment = (VECTORS / SEGMENT).read_bytes()
    cut_inside_last = segment[:-1]
    assert [h.base_offset for _, h in iter_headers(cut_inside_last)] == [0, 3, 8, 12, 18]
    with_partial_header = segment + vector_bytes(VALID[0])[:30]
    assert len(list(iter_headers(with_partial_header))) == 6
    with_partial_body = segment + vector_bytes(VALID[0])[:80]
    assert len(list(iter_headers(with_partial_body))) == 6
    assert len(list(iter_headers(segment, end=len(segment) - 78))) == 5


def test_segment_walk_from_a_start_position():
    segment = (VECTORS / SEGMENT).read_bytes()
    start = len(vector_bytes(VALID[0]))
    assert [h.base_offset for _, h in iter_headers(segment, start)] == [3, 8, 12, 18, 19]


@pytest.mark.parametrize("name", UNCOMPRESSED)
def test_reencoding_an_uncompressed_vector_reproduces_its_bytes(name):
    data = vector_bytes(name)
    assert reencode(decode_batch(data), Compression.NONE) == data


def test_reencoding_the_gzip_vector_keeps_every_field_but_the_compressed_bytes():
    original = decode_batch(vector_bytes("gzip_idempotent_pid7_epoch1_seq5"))
    again = decode_batch(reencode(original, Compression.GZIP))
    assert again.records == original.records
    assert again.header.compression is Compression.GZIP
    ignore = {"crc", "batch_length"}
    fields = [f.name for f in dataclasses.fields(original.header) if f.name not in ignore]
    assert ([getattr(again.header, f) for f in fields]
            == [getattr(original.header, f) for f in fields])


@pytest.mark.parametrize("name, commit, epoch", [
    ("control_commit_pid1000_epoch3_coordepoch2", True, 3),
    ("control_abort_pid1000_epoch4_coordepoch2", False, 4),
])
def test_control_vectors_decode_and_reencode_as_markers(name, commit, epoch):
    data = vector_bytes(name)
    batch = decode_batch(data)
    (record,) = batch.records
    want_type = ControlType.COMMIT if commit else ControlType.ABORT
    assert decode_control_record(record) == (want_type, 2)
    marker = encode_end_txn_marker(producer_id=1000, producer_epoch=epoch, coordinator_epoch=2,
                                   commit=commit, timestamp_ms=record.timestamp,
                                   base_offset=batch.header.base_offset)
    assert marker == data


def test_end_txn_marker_reproduces_the_spec_vector():
    marker = encode_end_txn_marker(producer_id=1000, producer_epoch=3, coordinator_epoch=0,
                                   commit=True, timestamp_ms=1_700_000_000_000, base_offset=42,
                                   partition_leader_epoch=0)
    assert marker == SPEC_COMMIT_MARKER
    assert len(marker) == 78
    header = validate_batch(marker)
    assert header.crc == 0xD75FC58E
    assert header.batch_length == 66
    assert header.attributes == 0x30
    (record,) = decode_batch(marker).records
    assert decode_control_record(record) == (ControlType.COMMIT, 0)
