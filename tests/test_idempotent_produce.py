"""Idempotent produce through the embedded Broker: retries, fencing, restarts, and
the batch validation that guards the log.

Every rejected produce must leave the log exactly as it was: same log end offset,
same high watermark, same fetched bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from exactly.app import Broker
from tests.conftest import producer_id
from exactly.storage.clock import FakeClock
from exactly.storage.errors import (
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.record_batch import (
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_SIZE,
    MAGIC_OFFSET,
    SimpleRecord,
    decode_batch,
    encode_batch,
    encode_end_txn_marker,
    iter_headers,
)

TOPIC = "t"
#: the first producer ids a fresh broker hands out (``hand_out`` takes them): a batch
#: through a broker carries an id the broker handed out
PID, OTHER_PID = 0, 1
# Seven batches of different sizes; the last five are the ones a retry may repeat.
SIZES = [1, 2, 3, 1, 4, 2, 3]
NOW = 1_700_000_000_000  # FakeClock's start: record timestamps near it never roll segments


def batch(seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0) -> bytes:
    """An idempotent batch whose record values name their sequences: v-<seq>."""
    return encode_batch([SimpleRecord(f"v-{seq + i}".encode(), timestamp=NOW + i)
                         for i in range(count)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def log_end_offset(broker: Broker, topic: str = TOPIC, partition: int = 0) -> int:
    async def get() -> int:
        return broker.engine.partitions.log(topic, partition).log_end_offset
    return broker.engine.call(get)


def segment_count(broker: Broker) -> int:
    async def get() -> int:
        return len(broker.engine.partitions.log(TOPIC, 0).segments)
    return broker.engine.call(get)


def fetch_all(broker: Broker, topic: str = TOPIC, partition: int = 0) -> bytes:
    """Every batch up to the high watermark; a fetch stops at a segment's end, so
    continue from its ``next_offset`` as a consumer would."""
    out, offset = [], 0
    while True:
        result = broker.fetch(topic, partition, offset, max_bytes=1 << 24)
        if not result.records:
            assert offset == result.high_watermark
            return b"".join(out)
        out.append(result.records)
        offset = result.next_offset


def values(broker: Broker) -> list[bytes | None]:
    """Every record value in the partition, in offset order."""
    data = fetch_all(broker)
    return [record.value for position, h in iter_headers(data)
            for record in decode_batch(data[position:position + h.size]).records]


def picture(broker: Broker) -> tuple[int, int, bytes]:
    """(log end offset, high watermark, every fetched byte)."""
    return (log_end_offset(broker), broker.fetch(TOPIC, 0, 0).high_watermark, fetch_all(broker))


def assert_rejected(broker: Broker, raw: bytes, error: type[KafkaError], code: int,
                    topic: str = TOPIC, partition: int = 0) -> None:
    before = picture(broker)
    with pytest.raises(error) as caught:
        broker.produce(topic, partition, raw)
    assert type(caught.value) is error
    assert caught.value.code == code
    assert picture(broker) == before


@pytest.fixture
def open_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Opens brokers on one data directory; closes whatever is still open at the end."""
    opened: list[Broker] = []

    def open_(**config: object) -> Broker:
        broker = Broker(tmp_path / "data", clock=FakeClock(), **config)
        opened.append(broker)
        return broker

    yield open_
    for broker in opened:
        broker.close()


def hand_out(broker: Broker) -> None:
    """InitProducerId twice on a fresh broker: PID and OTHER_PID."""
    assert [producer_id(broker), producer_id(broker)] == [PID, OTHER_PID]


@pytest.fixture
def broker(open_broker: Callable[..., Broker]) -> Broker:
    b = open_broker()
    b.create_topic(TOPIC, partitions=1)
    hand_out(b)
    return b


def produce_seven(broker: Broker) -> list[tuple[int, int, int]]:
    """(first seq, count, base offset) of SIZES from PID, interleaved with a
    non-idempotent writer so the producer's offsets are not its sequences."""
    written = []
    seq = 0
    for i, count in enumerate(SIZES):
        broker.produce(TOPIC, 0, encode_batch([SimpleRecord(f"other-{i}".encode(), timestamp=NOW)]))
        written.append((seq, count, broker.produce(TOPIC, 0, batch(seq, count))))
        seq += count
    return written


def expected_values() -> list[bytes]:
    out, seq = [], 0
    for i, count in enumerate(SIZES):
        out.append(f"other-{i}".encode())
        out.extend(f"v-{s}".encode() for s in range(seq, seq + count))
        seq += count
    return out


# --- retries --------------------------------------------------------------------------------


@pytest.mark.parametrize("age", range(5))
def test_retry_of_each_of_the_last_five_batches_answers_the_original_offset(
        broker: Broker, age: int) -> None:
    written = produce_seven(broker)
    assert [w[2] for w in written] == [1, 3, 6, 10, 12, 17, 20]
    before = picture(broker)
    assert before[0] == before[1] == 23
    seq, count, base_offset = written[-1 - age]
    assert broker.produce(TOPIC, 0, batch(seq, count)) == base_offset
    assert picture(broker) == before
    assert values(broker) == expected_values()


def test_every_retry_in_a_row_appends_nothing(broker: Broker) -> None:
    written = produce_seven(broker)
    before = picture(broker)
    for seq, count, base_offset in reversed(written[-5:]):
        assert broker.produce(TOPIC, 0, batch(seq, count), acks=1) == base_offset
    assert picture(broker) == before
    assert broker.produce(TOPIC, 0, batch(sum(SIZES))) == before[0]


def test_retry_of_the_sixth_oldest_batch_is_out_of_order(broker: Broker) -> None:
    written = produce_seven(broker)
    seq, count, _ = written[-6]
    assert_rejected(broker, batch(seq, count), OutOfOrderSequenceNumberError, 45)


# --- sequence and epoch errors ------------------------------------------------------------------


@pytest.mark.parametrize("seq", [4, 5, 100, 1, 0])
def test_out_of_order_sequence_is_rejected_and_appends_nothing(broker: Broker, seq: int) -> None:
    broker.produce(TOPIC, 0, batch(0, 2))
    broker.produce(TOPIC, 0, batch(2, 1))
    assert_rejected(broker, batch(seq, 1), OutOfOrderSequenceNumberError, 45)
    assert broker.produce(TOPIC, 0, batch(3, 1)) == 3


def test_stale_epoch_is_rejected_and_appends_nothing(broker: Broker) -> None:
    broker.produce(TOPIC, 0, batch(0, 2, epoch=0))
    assert broker.produce(TOPIC, 0, batch(0, 1, epoch=1)) == 2
    assert_rejected(broker, batch(2, 1, epoch=0), InvalidProducerEpochError, 47)
    assert_rejected(broker, batch(0, 2, epoch=0), InvalidProducerEpochError, 47)


def test_new_epoch_not_starting_at_zero_is_out_of_order(broker: Broker) -> None:
    broker.produce(TOPIC, 0, batch(0, 2, epoch=0))
    assert_rejected(broker, batch(2, 1, epoch=1), OutOfOrderSequenceNumberError, 45)


@pytest.mark.parametrize("seq", [1, 42])
def test_unknown_producer_with_nonzero_sequence_is_unknown_producer_id(broker: Broker,
                                                                       seq: int) -> None:
    broker.produce(TOPIC, 0, batch(0, pid=OTHER_PID))
    assert_rejected(broker, batch(seq), UnknownProducerIdError, 59)


# --- restart ----------------------------------------------------------------------------------


def damage_snapshots(partition_dir: Path, how: str) -> None:
    snapshots = sorted(partition_dir.glob("*.snapshot"))
    assert snapshots
    if how == "newest-corrupt":
        data = bytearray(snapshots[-1].read_bytes())
        data[-1] ^= 0x01
        snapshots[-1].write_bytes(bytes(data))
    elif how == "all-deleted":
        for path in snapshots:
            path.unlink()


@pytest.mark.parametrize("snapshots", ["intact", "newest-corrupt", "all-deleted"])
@pytest.mark.parametrize("segment_bytes", [1 << 30, 200], ids=["one-segment", "many-segments"])
def test_duplicates_are_still_detected_after_close_and_reopen(
        open_broker: Callable[..., Broker], tmp_path: Path, segment_bytes: int,
        snapshots: str) -> None:
    """From the shutdown snapshot, or -- when it is damaged or gone -- from an older
    snapshot or the log itself."""
    broker = open_broker(**{"segment.bytes": segment_bytes})
    broker.create_topic(TOPIC, partitions=1)
    hand_out(broker)
    written = produce_seven(broker)
    before = picture(broker)
    assert (segment_count(broker) > 5) == (segment_bytes == 200)
    broker.close()
    damage_snapshots(tmp_path / "data" / f"{TOPIC}-0", snapshots)

    broker = open_broker(**{"segment.bytes": segment_bytes})
    assert picture(broker) == before
    for seq, count, base_offset in written[-5:]:
        assert broker.produce(TOPIC, 0, batch(seq, count)) == base_offset
    assert picture(broker) == before
    seq, count, _ = written[-6]
    assert_rejected(broker, batch(seq, count), OutOfOrderSequenceNumberError, 45)
    assert broker.produce(TOPIC, 0, batch(sum(SIZES), 2)) == before[0]
    assert values(broker) == expected_values() + [b"v-16", b"v-17"]


# --- batch validation ------------------------------------------------------------------------


def test_control_batch_from_a_producer_is_invalid_record(broker: Broker) -> None:
    broker.produce(TOPIC, 0, batch(0))
    marker = encode_end_txn_marker(PID, 0, 0, commit=True, timestamp_ms=1_000)
    assert_rejected(broker, marker, InvalidRecordError, 87)
    forged = encode_batch([SimpleRecord(b"x", key=b"\0\0\0\1", timestamp=1)],
                          producer_id=PID, producer_epoch=0, base_sequence=1, control=True)
    assert int.from_bytes(forged[21:23], "big") & CONTROL_BIT
    assert_rejected(broker, forged, InvalidRecordError, 87)


@pytest.mark.parametrize("position", [CRC_OFFSET, HEADER_SIZE - 1, HEADER_SIZE + 3, -1])
def test_batch_with_a_bad_crc_is_corrupt_message(broker: Broker, position: int) -> None:
    broker.produce(TOPIC, 0, batch(0))
    damaged = bytearray(batch(1, 3))
    damaged[position] ^= 0x01
    assert_rejected(broker, bytes(damaged), CorruptMessageError, 2)
    # The intact batch is still in sequence.
    assert broker.produce(TOPIC, 0, batch(1, 3)) == 1


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_batch_with_a_bad_magic_is_invalid_record(broker: Broker, magic: int) -> None:
    damaged = bytearray(batch(0))
    damaged[MAGIC_OFFSET] = magic
    assert_rejected(broker, bytes(damaged), InvalidRecordError, 87)


def test_two_batches_in_one_produce_are_invalid_record(broker: Broker) -> None:
    assert_rejected(broker, batch(0) + batch(1), InvalidRecordError, 87)
    assert_rejected(broker, encode_batch([SimpleRecord(b"a", timestamp=1)]) * 2,
                    InvalidRecordError, 87)


def sized_batch(size: int) -> bytes:
    """A plain batch of exactly ``size`` bytes."""
    for value_size in range(size, -1, -1):
        raw = encode_batch([SimpleRecord(b"x" * value_size, timestamp=NOW)])
        if len(raw) == size:
            return raw
    raise AssertionError(f"no batch of {size} bytes")


def test_batch_larger_than_max_message_bytes_is_message_too_large(broker: Broker) -> None:
    broker.create_topic("small", partitions=1, config={"max.message.bytes": 300})
    too_big, exact = sized_batch(301), sized_batch(300)
    with pytest.raises(MessageTooLargeError) as caught:
        broker.produce("small", 0, too_big)
    assert caught.value.code == 10
    assert log_end_offset(broker, "small") == 0
    assert broker.produce("small", 0, exact) == 0
    # The limit is the topic's: the default topic takes the same batch.
    assert broker.produce(TOPIC, 0, too_big) == 0


def test_batch_larger_than_segment_bytes_is_record_list_too_large(broker: Broker) -> None:
    broker.create_topic("tiny", partitions=1, config={"segment.bytes": 100})
    raw = sized_batch(150)
    with pytest.raises(RecordListTooLargeError) as caught:
        broker.produce("tiny", 0, raw)
    assert caught.value.code == 18
    assert log_end_offset(broker, "tiny") == 0


def test_unknown_topic_or_partition(broker: Broker) -> None:
    for topic, partition in [("nope", 0), (TOPIC, 1), (TOPIC, -1)]:
        with pytest.raises(UnknownTopicOrPartitionError) as caught:
            broker.produce(topic, partition, batch(0))
        assert caught.value.code == 3
        with pytest.raises(UnknownTopicOrPartitionError):
            broker.fetch(topic, partition, 0)
    assert picture(broker) == (0, 0, b"")


def test_fetch_beyond_the_log_end_is_offset_out_of_range(broker: Broker) -> None:
    broker.produce(TOPIC, 0, batch(0, 3))
    at_end = broker.fetch(TOPIC, 0, 3)
    assert at_end.records == b"" and at_end.high_watermark == 3
    for offset in (4, 1000, -1):
        with pytest.raises(OffsetOutOfRangeError) as caught:
            broker.fetch(TOPIC, 0, offset)
        assert caught.value.code == 1
