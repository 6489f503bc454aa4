"""docs/formats.md is pinned to the code: every dump and file it shows is rebuilt here.

The document marks what it shows with an HTML comment before a fenced block:

* ``<!-- dump: NAME -->`` an annotated dump (``pos | bytes | field | type | value``):
  its bytes must be exactly what the code writes for NAME, every position must follow
  from the ones before, and every annotated value must be what its bytes say;
* ``<!-- file: data-dir/PATH -->`` a text file of the worked data directory;
* ``<!-- tree: data-dir -->`` that directory's files and sizes;
* ``<!-- hex: NAME -->`` plain hex; ``<!-- table: varints -->`` the varint table.

The worked data directory is built as the document says: the vectors' segment as
partition 0 of topic ``vectors``, recovered by a real start, then a clean stop.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

import crc32c
import pytest

from exactly.app import Broker
from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.producer_id_manager import ProducerIdManager
from exactly.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from exactly.storage import filenames
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.filenames import COORDINATOR_EPOCH
from exactly.storage.log_config import LogConfig
from exactly.storage.log_manager import LogManager
from exactly.storage.record_batch import (ControlType, decode_batch, decode_control_record,
                                  encode_end_txn_marker)
from exactly.storage.varint import decode_uvarint, decode_varint, encode_varint
from tests.conftest import FROZEN

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "formats.md"
VECTORS = REPO / "tests" / "data" / "record_batches"
DATA_DIR = "data-dir/"

_MARKED = re.compile(r"<!-- (dump|file|tree|hex): (\S+) -->\n```[a-z]*\n(.*?)\n```", re.DOTALL)
_FIXED = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint32": 4}


def doc_text() -> str:
    return DOC.read_text()


def marked(kind: str) -> dict[str, str]:
    return {name: body for k, name, body in _MARKED.findall(doc_text()) if k == kind}


def dump_lines(body: str) -> list[tuple[int, bytes, str, str, str]]:
    """``(pos, bytes, field, type, value)`` of each field line; comments are skipped."""
    lines = []
    for line in body.splitlines():
        cols = [col.strip() for col in line.split("|")]
        if len(cols) == 5 and cols[0].isdigit():
            lines.append((int(cols[0]), bytes.fromhex(cols[1]), cols[2], cols[3], cols[4]))
    return lines


def dump_bytes(name: str) -> bytes:
    return b"".join(raw for _, raw, *_ in dump_lines(marked("dump")[name]))


def annotated(value: str) -> int | str:
    """The value an annotation states: a quoted string, or an integer (``0x`` for hex)."""
    if value.startswith('"'):
        return json.JSONDecoder().raw_decode(value)[0]
    return int(value.split()[0], 0)


def read_value(kind: str, raw: bytes) -> int | str:
    """What ``raw`` says as a ``kind``: the rule each dump's type column names."""
    if kind in _FIXED:
        assert len(raw) == _FIXED[kind], f"a {kind} is {_FIXED[kind]} bytes, not {len(raw)}"
        return int.from_bytes(raw, "big", signed=kind != "uint32")
    if kind in ("varint", "varlong"):
        value, end = decode_varint(raw, 0)
        assert end == len(raw), "one varint per line"
        return value
    if kind == "string":
        assert int.from_bytes(raw[:2], "big") == len(raw) - 2, "an int16 length, then the bytes"
        return raw[2:].decode()
    if kind == "bytes":
        return raw.decode()
    raise AssertionError(f"unknown type {kind!r}")


def vector(name: str) -> bytes:
    return (VECTORS / f"{name}.bin").read_bytes()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worked data directory of section 1."""
    data = tmp_path_factory.mktemp("formats") / "data"
    logs = LogManager(data, LogConfig(), FakeClock())
    run_inline(logs.create_topic("vectors", 1, {"index.interval.bytes": "100", "cleanup.policy": "compact"}))
    logs.close(clean=False)
    partition = data / "vectors-0"
    for path in partition.iterdir():
        path.unlink()
    shutil.copy(VECTORS / "segment_00000000000000000000.log", partition / "00000000000000000000.log")
    LogManager(data, LogConfig(), FakeClock()).close()
    return data


def producer_id_block(tmp_path: Path) -> bytes:
    manager = ProducerIdManager(tmp_path)
    block = manager.next_block()
    block.run()  # the coordinator runs this off its loop, before the first id is handed out
    manager.install(block)
    assert manager.next_id() == 0
    return (tmp_path / "producer-id-block").read_bytes()


def coordinator_epoch_file(tmp_path: Path) -> bytes:
    """The file after the fourth start of a coordinator on ``tmp_path``."""
    for _ in range(4):
        Broker(tmp_path / "data", **FROZEN).close()
    return (tmp_path / "data" / COORDINATOR_EPOCH).read_bytes()


def transaction_log_value() -> bytes:
    return transaction_log.encode_value(TxnTransitMetadata(
        producer_id=1000, last_producer_id=-1, producer_epoch=3, last_producer_epoch=-1,
        txn_timeout_ms=60_000, state=TransactionState.ONGOING,
        partitions=frozenset({("orders", 0), ("orders", 1)}),
        txn_start_timestamp=1_763_800_000_000, txn_last_update_timestamp=1_763_800_000_000))


#: what the code writes for each dump of the document
EXPECTED: dict[str, Callable[[Path, Path], bytes]] = {
    "transactional-batch": lambda data, tmp: vector("transactional_pid1000_epoch3_seq10"),
    "commit-marker": lambda data, tmp: encode_end_txn_marker(
        producer_id=1000, producer_epoch=3, coordinator_epoch=2, commit=True,
        timestamp_ms=1_763_800_000_010, base_offset=18, partition_leader_epoch=0),
    "data-dir/vectors-0/00000000000000000000.index":
        lambda data, tmp: (data / "vectors-0/00000000000000000000.index").read_bytes(),
    "data-dir/vectors-0/00000000000000000000.timeindex":
        lambda data, tmp: (data / "vectors-0/00000000000000000000.timeindex").read_bytes(),
    "data-dir/vectors-0/00000000000000000000.txnindex":
        lambda data, tmp: (data / "vectors-0/00000000000000000000.txnindex").read_bytes(),
    "data-dir/vectors-0/00000000000000000020.snapshot":
        lambda data, tmp: (data / "vectors-0/00000000000000000020.snapshot").read_bytes(),
    "producer-id-block": lambda data, tmp: producer_id_block(tmp),
    "transaction-coordinator-epoch": lambda data, tmp: coordinator_epoch_file(tmp),
    "transaction-log-key": lambda data, tmp: transaction_log.encode_key("billing-1"),
    "transaction-log-value": lambda data, tmp: transaction_log_value(),
    "offset-commit-key": lambda data, tmp: offsets_log.encode_offset_key("billing", "orders", 0),
    "offset-commit-value": lambda data, tmp: offsets_log.encode_offset_value(
        offsets_log.OffsetValue(offset=12, leader_epoch=-1, metadata="",
                                commit_timestamp=1_763_800_000_010)),
}


def test_every_dump_in_the_document_is_pinned():
    assert set(marked("dump")) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dump_bytes_are_what_the_code_writes(name, data_dir, tmp_path):
    assert dump_bytes(name).hex(" ") == EXPECTED[name](data_dir, tmp_path).hex(" ")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dump_positions_and_annotations_agree_with_the_bytes(name):
    lines = dump_lines(marked("dump")[name])
    assert lines, f"{name} has no field lines"
    position = 0
    for pos, raw, field, kind, value in lines:
        assert pos == position, f"{name} {field}: position {pos}, the bytes before end at {position}"
        assert read_value(kind, raw) == annotated(value), f"{name} {field}"
        position += len(raw)


def test_transactional_batch_annotations_are_what_the_decoder_reports():
    batch = decode_batch(vector("transactional_pid1000_epoch3_seq10"))
    header_fields = {"BaseOffset": "base_offset", "BatchLength": "batch_length",
                     "PartitionLeaderEpoch": "partition_leader_epoch", "Magic": "magic",
                     "CRC": "crc", "Attributes": "attributes",
                     "LastOffsetDelta": "last_offset_delta", "BaseTimestamp": "base_timestamp",
                     "MaxTimestamp": "max_timestamp", "ProducerId": "producer_id",
                     "ProducerEpoch": "producer_epoch", "BaseSequence": "base_sequence",
                     "RecordCount": "record_count"}
    lines = dump_lines(marked("dump")["transactional-batch"])
    header = {field: annotated(value) for _, _, field, _, value in lines[:len(header_fields)]}
    assert header == {field: getattr(batch.header, attr) for field, attr in header_fields.items()}
    assert batch.header.is_transactional and not batch.header.is_control
    values = [annotated(value) for _, _, field, _, value in lines if field == "Value"]
    assert values == [record.value.decode() for record in batch.records]
    assert all(record.key is None for record in batch.records)


def test_commit_marker_annotations_are_what_the_decoder_reports():
    batch = decode_batch(vector("control_commit_pid1000_epoch3_coordepoch2"))
    fields = {field: annotated(value) for _, _, field, _, value in dump_lines(marked("dump")["commit-marker"])}
    (record,) = batch.records
    assert decode_control_record(record) == (ControlType(fields["Key.Type"]), fields["Value.CoordinatorEpoch"])
    assert fields["Key.Type"] == ControlType.COMMIT
    assert (fields["ProducerId"], fields["ProducerEpoch"]) == (batch.header.producer_id, batch.header.producer_epoch)


def test_the_commit_marker_at_offset_42_is_what_the_encoder_writes():
    marker = encode_end_txn_marker(producer_id=1000, producer_epoch=3, coordinator_epoch=0,
                                   commit=True, timestamp_ms=1_700_000_000_000, base_offset=42,
                                   partition_leader_epoch=0)
    assert bytes.fromhex(marked("hex")["commit-marker-42"]) == marker
    assert "`0xd75fc58e`" in doc_text() and f"{crc32c.crc32c(marker[21:]):#010x}" == "0xd75fc58e"


def test_data_directory_tree_is_what_a_start_and_clean_stop_leave(data_dir):
    shown = {tuple(line.split()[::-1]) for line in marked("tree")["data-dir"].splitlines()}
    found = {(str(p.relative_to(data_dir)), str(p.stat().st_size))
             for p in data_dir.rglob("*") if p.is_file()}
    assert shown == found


def test_text_files_are_what_the_broker_writes(data_dir):
    files = marked("file")
    assert files, "the document shows the data directory's text files"
    for name, shown in files.items():
        assert name.startswith(DATA_DIR)
        written = (data_dir / name.removeprefix(DATA_DIR)).read_text()
        # the random ids of a new directory and topic: take the document's
        written = re.sub(r"cluster\.id=\S+", re.search(r"cluster\.id=\S+|$", shown).group(), written)
        written = re.sub(r'"topic_id": "[^"]*"', re.search(r'"topic_id": "[^"]*"|$', shown).group(), written)
        if shown_id := re.search(r"^topic_id: \S+", shown, re.M):  # partition.metadata
            written = re.sub(r"^topic_id: \S+", shown_id.group(), written, flags=re.M)
        assert written.rstrip("\n") == shown, name


def test_varint_table_is_what_the_encoder_writes():
    table = doc_text().split("<!-- table: varints -->\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip(" `") for cell in row.strip("|").split("|")] for row in table.splitlines()[2:]]
    assert len(rows) >= 5
    for value, zigzag, hex_bytes in rows:
        assert encode_varint(int(value)) == bytes.fromhex(hex_bytes)
        assert decode_uvarint(bytes.fromhex(hex_bytes), 0)[0] == int(zigzag)
        assert decode_varint(bytes.fromhex(hex_bytes), 0)[0] == int(value)


def test_crc32c_check_value_is_the_documented_one():
    assert "`0xE3069283`" in doc_text()
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_every_file_name_the_broker_writes_is_described():
    names = [value for key, value in vars(filenames).items()
             if key.isupper() and isinstance(value, str)]
    assert ".log" in names and ".lock" in names
    spans = re.findall(r"`([^`\n]+)`", doc_text())
    missing = [name for name in names
               if not any(name in span for span in spans)]
    assert not missing, f"docs/formats.md does not describe {missing}"
