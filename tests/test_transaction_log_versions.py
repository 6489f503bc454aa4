"""``__transaction_state`` values in both versions: v0 (what every record was before
KIP-939's bump, and still is unless a tagged field is set) and v1, Kafka's flexible
version whose tagged fields carry what keepPreparedTxn gave the recovering client.
A log written in the old format loads; a reader skips tags it does not know."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.coordinator import transaction_log
from exactly.coordinator.schema import SchemaError
from exactly.coordinator.transaction_state import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TransactionState,
    TxnTransitMetadata,
)
from exactly.storage.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, SimpleRecord, encode_batch
from tests.conftest import SMALL_INTERNAL_TOPICS
from tests.raw_txn import RawTxn, coordinator_call
from tests.storage_log import DurableLogs

pytestmark = pytest.mark.timeout(60)


def old_format_value(producer_id: int, epoch: int, status: int, partitions: dict[str, list[int]],
                     timeout_ms: int = 60_000, last_update_ms: int = 2_000, start_ms: int = 1_000) -> bytes:
    """A TransactionLogValue v0, packed by hand as Kafka's generated code writes it."""
    out = struct.pack(">hqhib", 0, producer_id, epoch, timeout_ms, status) + struct.pack(">i", len(partitions))
    for topic, ids in partitions.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(ids)) + b"".join(struct.pack(">i", p) for p in ids)
    return out + struct.pack(">qq", last_update_ms, start_ms)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def test_an_old_format_value_decodes_as_before() -> None:
    value = old_format_value(1000, 3, 1, {"orders": [0, 1]})
    transit = transaction_log.decode(transaction_log.encode_key("billing-1"), value).transit
    assert transit is not None
    assert (transit.producer_id, transit.producer_epoch, transit.state) == (1000, 3, TransactionState.ONGOING)
    assert transit.partitions == {("orders", 0), ("orders", 1)}
    assert (transit.next_producer_id, transit.next_producer_epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    assert transaction_log.encode_value(transit) == value, "a value with nothing tagged is still written as v0"


def test_a_kept_transaction_is_written_as_v1_with_its_next_producer_in_tagged_fields() -> None:
    transit = TxnTransitMetadata(1000, NO_PRODUCER_ID, 3, NO_PRODUCER_EPOCH, TWO_PHASE_COMMIT_TIMEOUT_MS,
                                 TransactionState.ONGOING, frozenset({("orders", 0)}), 1_000, 2_000,
                                 next_producer_id=1000, next_producer_epoch=4)
    value = transaction_log.encode_value(transit)
    assert value[:2] == b"\x00\x01"
    tags = uvarint(2) + uvarint(1) + uvarint(8) + struct.pack(">q", 1000) + uvarint(3) + uvarint(2) + struct.pack(">h", 4)
    assert value.endswith(struct.pack(">qq", 2_000, 1_000) + tags)
    assert transaction_log.decode(transaction_log.encode_key("t"), value).transit == transit


def test_tags_a_reader_does_not_know_are_skipped_and_damage_is_refused() -> None:
    transit = TxnTransitMetadata(7, NO_PRODUCER_ID, 0, NO_PRODUCER_EPOCH, 60_000, TransactionState.EMPTY,
                                 frozenset(), -1, 5, next_producer_id=7, next_producer_epoch=1)
    value = transaction_log.encode_value(transit)
    head, count = value[:-(1 + 10 + 4)], value[-(1 + 10 + 4)]
    assert count == 2
    unknown = uvarint(9) + uvarint(3) + b"abc"  # a tag from a later Kafka
    with_unknown = head + uvarint(3) + value[-(10 + 4):] + unknown
    assert transaction_log.decode(transaction_log.encode_key("t"), with_unknown).transit == transit
    with pytest.raises(SchemaError):
        transaction_log.decode(transaction_log.encode_key("t"), value[:-1])
    with pytest.raises(SchemaError, match="version 2"):
        transaction_log.decode(transaction_log.encode_key("t"), b"\x00\x02" + value[2:])


@given(producer_id=st.integers(0, 2**63 - 1), epoch=st.integers(0, 32766),
       state=st.sampled_from([s for s in TransactionState if s is not TransactionState.DEAD]),
       partitions=st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=5),
       next_producer=st.one_of(st.just((NO_PRODUCER_ID, NO_PRODUCER_EPOCH)),
                               st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 32766))),
       times=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)))
def test_every_value_decodes_to_what_was_encoded(producer_id: int, epoch: int, state: TransactionState,
                                                 partitions: frozenset, next_producer: tuple[int, int],
                                                 times: tuple[int, int]) -> None:
    transit = TxnTransitMetadata(producer_id, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, 60_000, state, partitions,
                                 times[0], times[1], next_producer_id=next_producer[0],
                                 next_producer_epoch=next_producer[1])
    value = transaction_log.encode_value(transit)
    assert value[:2] == (b"\x00\x01" if next_producer[1] != NO_PRODUCER_EPOCH else b"\x00\x00")
    assert transaction_log.decode(transaction_log.encode_key("id"), value).transit == transit


def test_a_transaction_log_written_in_the_old_format_loads_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        RawTxn(broker, "first")  # creates __transaction_state
        partitions = broker.engine.config.transaction_state_log_num_partitions
    with DurableLogs(data) as logs:  # a record as a broker before this change wrote it
        partition = transaction_log.partition_for("legacy", partitions)
        logs.produce(transaction_log.TOPIC, partition, encode_batch([SimpleRecord(
            old_format_value(500, 3, TransactionState.COMPLETE_COMMIT.id, {}),
            key=transaction_log.encode_key("legacy"))]))
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        loaded = broker.engine.transactions.coordinator.describe("legacy")
        assert loaded is not None and (loaded.producer_id, loaded.producer_epoch) == (500, 3)
        assert loaded.state is TransactionState.COMPLETE_COMMIT
        assert coordinator_call(broker, "init_producer_id", "legacy", 60_000) == (500, 4)
