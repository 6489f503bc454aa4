"""What a produced batch must be before the log takes it, and how it is stored (Kafka's ``LogValidator``).

:func:`validate` checks one producer batch against the record format and the topic's
config -- a compacted topic's keys, and, with CreateTime, each record's timestamp against
``message.timestamp.before.max.ms`` / ``after.max.ms`` -- and raises the Kafka error for
the first thing wrong (naming each refused record, as Produce v8+ answers them); :func:`recompressed`
puts it in the topic's ``compression.type``; :func:`stamped` sets its max timestamp
and timestamp type as ``message.timestamp.type`` says. All three are pure: the log
(``exactly/storage/partition_log.py``) calls them in that order, then assigns the offsets.
"""

from __future__ import annotations

from exactly.storage.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
)
from exactly.storage.log_config import LONG_MAX, LogConfig
from exactly.storage.record_batch import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    decode_batch,
    read_header,
    recompress,
    restamp,
    scan_batch,
    validate_batch,
)


def validate(batch: bytes, config: LogConfig, topic_partition: str, now: int) -> tuple[BatchHeader, int]:
    """The header and max record timestamp of a well-formed producer batch for a log
    with ``config`` (``topic_partition`` names it in Kafka's message), at ``now`` (the
    broker's clock, which record timestamps are checked against)."""
    if len(batch) < HEADER_SIZE:
        raise CorruptMessageError(f"{len(batch)} bytes is shorter than a record batch header")
    header = read_header(batch)
    if header.size > len(batch):
        raise CorruptMessageError(
            f"batch length says {header.size} bytes but only {len(batch)} arrived")
    if header.size < len(batch):
        raise InvalidRecordError("a produce request must carry exactly one record batch per partition")
    if header.size > config.segment_bytes:
        raise RecordListTooLargeError(
            f"batch of {header.size} bytes cannot fit a segment (segment.bytes={config.segment_bytes})")
    if header.size > config.max_message_bytes:
        raise MessageTooLargeError(
            f"batch of {header.size} bytes exceeds max.message.bytes={config.max_message_bytes}")
    validate_batch(batch)  # a damaged batch is CORRUPT_MESSAGE before anything else
    if header.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if header.producer_id < -1 or (header.has_producer_id and (
            header.producer_epoch < 0 or header.base_sequence < 0)):
        raise InvalidRecordError(
            f"invalid producer fields: id {header.producer_id}, epoch {header.producer_epoch}, "
            f"base sequence {header.base_sequence}")
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecordError("a transactional batch needs a producer id")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise InvalidRecordError(
            f"record count {header.record_count} does not match last offset delta "
            f"{header.last_offset_delta}")
    scanned = scan_batch(batch, verify_crc=False)  # every record's structure, as Kafka's LogValidator
    before, after = config.timestamp_bounds_ms
    checks_timestamps = not config.log_append_time and (before, after) != (LONG_MAX, LONG_MAX)
    if config.compact or checks_timestamps:
        records = decode_batch(batch, verify_crc=False).records
        if config.compact:
            _refuse(InvalidRecordError, [  # Kafka's LogValidator, word for word
                (i, f"Compacted topic cannot accept message without key in topic partition {topic_partition}")
                for i, record in enumerate(records) if record.key is None])
        if checks_timestamps:
            _refuse(InvalidTimestampError, [
                (i, f"Timestamp {record.timestamp} of message with offset {i} is out of range. The timestamp "
                    f"should be within [{now - before}, {now + after}]")
                for i, record in enumerate(records)
                if not now - before <= record.timestamp <= now + after])
    return scanned


def _refuse(error: type[InvalidRecordError] | type[InvalidTimestampError], record_errors: list[tuple[int, str]]) -> None:
    """Raise ``error`` for the batch's refused records, if any (Kafka's
    ``processRecordErrors``: the answer lists each record's index and why, and the
    message shows the first three as Kafka's ``RecordError.toString`` does)."""
    if record_errors:
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                          for index, message in record_errors[:3])
        raise error(f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                    f"and only showing the first three errors at most: [{shown}]", record_errors)


def recompressed(batch: bytes, header: BatchHeader, config: LogConfig) -> tuple[bytes, BatchHeader]:
    """The batch in the topic's ``compression.type`` codec (unchanged for ``producer``);
    a batch that grows past ``max.message.bytes`` by it is MESSAGE_TOO_LARGE."""
    target = config.compression
    if target is None or header.compression is target:
        return batch, header
    batch = recompress(batch, target)
    header = read_header(batch)
    if header.size > config.max_message_bytes:
        raise MessageTooLargeError(f"batch of {header.size} bytes in {target.name.lower()} exceeds "
                                   f"max.message.bytes={config.max_message_bytes}")
    return batch, header


def stamped(batch: bytes, header: BatchHeader, max_timestamp: int, now: int,
            config: LogConfig) -> tuple[bytes, BatchHeader]:
    """Set the batch's max timestamp and timestamp type as the topic says
    (Kafka's ``setMaxTimestamp``); re-CRC only if they change."""
    if config.log_append_time:
        max_timestamp, attributes = now, header.attributes | TIMESTAMP_TYPE_BIT
    else:
        attributes = header.attributes & ~TIMESTAMP_TYPE_BIT
    if max_timestamp == header.max_timestamp and attributes == header.attributes:
        return batch, header
    batch = restamp(batch, attributes=attributes, max_timestamp=max_timestamp)
    return batch, read_header(batch)
