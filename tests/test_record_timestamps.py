"""Record timestamps against the broker's clock (KIP-937's ``message.timestamp.before.max.ms``
and ``after.max.ms``, and the older ``difference.max.ms`` they fall back to), and the
answer a refused batch gets: Kafka's INVALID_TIMESTAMP / INVALID_RECORD naming each
refused record, with the partition's log start offset, and nothing appended."""

from __future__ import annotations

import pytest

from exactly.app import Broker
from exactly.storage.clock import FakeClock
from exactly.storage.errors import InvalidRecordError, InvalidTimestampError, OutOfOrderSequenceNumberError
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.conftest import producer_id

HOUR = 3_600_000


def records(*timestamps: int) -> bytes:
    return encode_batch([SimpleRecord(b"v", key=b"k", timestamp=ts) for ts in timestamps])


def test_a_record_older_or_newer_than_the_topic_allows_is_refused_by_index(broker: Broker, clock: FakeClock) -> None:
    now = clock.now_ms()
    broker.create_topic("t", 1, {"message.timestamp.before.max.ms": HOUR, "message.timestamp.after.max.ms": HOUR})
    assert broker.produce("t", 0, records(now - HOUR, now + HOUR)) == 0  # the bounds are inclusive
    with pytest.raises(InvalidTimestampError) as refused:
        broker.produce("t", 0, records(now, now - HOUR - 1, now + HOUR + 1))
    assert [index for index, _ in refused.value.record_errors] == [1, 2]
    assert refused.value.record_errors[0][1] == (
        f"Timestamp {now - HOUR - 1} of message with offset 1 is out of range. "
        f"The timestamp should be within [{now - HOUR}, {now + HOUR}]")
    assert broker.list_offsets("t", 0, -1) == 2, "nothing of the refused batch was appended"


def test_the_older_difference_setting_bounds_both_sides_until_they_are_set(broker: Broker, clock: FakeClock) -> None:
    now = clock.now_ms()
    broker.create_topic("t", 1, {"message.timestamp.difference.max.ms": HOUR,
                                 "message.timestamp.after.max.ms": 10 * HOUR})
    with pytest.raises(InvalidTimestampError):
        broker.produce("t", 0, records(now - 2 * HOUR))
    assert broker.produce("t", 0, records(now + 2 * HOUR)) == 0


def test_log_append_time_topics_and_default_topics_take_any_timestamp(broker: Broker, clock: FakeClock) -> None:
    broker.create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime",
                                        "message.timestamp.before.max.ms": HOUR})
    broker.create_topic("plain", 1)
    for topic in ("appended", "plain"):
        assert broker.produce(topic, 0, records(0, clock.now_ms() + 1000 * HOUR)) == 0


def test_a_refusal_of_what_the_batch_holds_carries_the_log_start_offset(broker: Broker) -> None:
    """Kafka's ReplicaManager answers a batch its log refused with the log's start offset
    (Produce's LogStartOffset), and -1 only when it could not read or hold the batch."""
    broker.create_topic("c", 1, {"cleanup.policy": "compact,delete"})
    for _ in range(3):
        broker.produce("c", 0, records(1))
    broker.engine.call(broker.engine.partitions.delete_records, {("c", 0): 2})
    with pytest.raises(InvalidRecordError) as keyless:
        broker.produce("c", 0, encode_batch([SimpleRecord(b"x", key=b"k"), SimpleRecord(b"y")]))
    assert (keyless.value.log_start_offset, keyless.value.record_errors[0][0]) == (2, 1)
    pid = producer_id(broker)
    broker.produce("c", 0, encode_batch([SimpleRecord(b"v", key=b"k")], producer_id=pid, producer_epoch=0,
                                        base_sequence=0))
    with pytest.raises(OutOfOrderSequenceNumberError) as gap:
        broker.produce("c", 0, encode_batch([SimpleRecord(b"v", key=b"k")], producer_id=pid, producer_epoch=0,
                                            base_sequence=5))
    assert gap.value.log_start_offset == 2
