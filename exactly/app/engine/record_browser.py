"""Read models of the console's record browser: pages of one partition's records,
whole, each with its batch and what a read_committed consumer makes of it.

The browser reads below the high watermark, markers included, as the records view
of ``read_models.records`` does, and takes each record's read_committed state from it
(one place decides that); the view of only what read_committed consumers receive
(AKHQ's default) filters as the consumer does (``exactly.storage.read_committed``). Unlike
``read_models.records``, keys, values and header values stay bytes here: the console
decodes them per view (text, JSON, hex). A filter matches records whose key or value
contains the text (ASCII case-insensitive); one filtered page looks through at most
:data:`SCAN_LIMIT` offsets and says how far it got, so a rare match never turns into
a scan of the whole log.

Coroutines on the engine's loop: ``engine.call(record_browser.page, engine, ...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from exactly.app.engine import read_models
from exactly.storage.errors import OffsetOutOfRangeError
from exactly.storage.partition_log import PartitionLog
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import BatchHeader, Record, decode_batch, iter_headers

if TYPE_CHECKING:
    from exactly.app.engine import Engine

#: the most records one filtered page looks through
SCAN_LIMIT = 2000
#: the most records one page shows
MAX_LIMIT = 500
#: batches a record's detail looks through for the marker that ended its transaction
MARKER_SEARCH_BATCHES = 1000
#: bytes of batches read from the log at a time
READ_BYTES = 1 << 16


def _batch(header: BatchHeader) -> dict[str, Any]:
    """What a record's batch says about it (the v2 batch header)."""
    return {"base_offset": header.base_offset, "last_offset": header.last_offset,
            "producer_id": header.producer_id, "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence, "transactional": header.is_transactional,
            "control": header.is_control, "compression": header.compression.name.lower(),
            "timestamp_type": "LogAppendTime" if header.timestamp_type else "CreateTime",
            "base_timestamp": header.base_timestamp, "max_timestamp": header.max_timestamp,
            "record_count": header.record_count, "size_bytes": header.size}


def _records(log: PartitionLog, start: int, end: int,
             read_committed: bool = False) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record in ``[start, end)`` with its batch header, read as a fetch reads
    (the offset index finds ``start``), :data:`READ_BYTES` at a time; with
    ``read_committed`` only those a read_committed consumer receives, as the
    consumer decides it (``exactly.storage.read_committed``): below the LSO, no markers, no
    aborted records."""
    offset = start
    while offset < end:
        chunk = log.read(offset, READ_BYTES, read_committed=read_committed)
        if not chunk.records:
            return
        delivered = {r.offset for r in read_records(chunk.records, offset, True,
                                                    chunk.aborted_transactions or ()).records} \
            if read_committed else None
        for position, header in iter_headers(chunk.records):
            if header.base_offset >= end:
                return
            for record in decode_batch(chunk.records[position:position + header.size]).records:
                if start <= record.offset < end and (delivered is None or record.offset in delivered):
                    yield header, record
        offset = chunk.next_offset


def _matches(header: BatchHeader, record: Record, needle: bytes | None) -> bool:
    """No filter, or the text in the key or value of a data record (a marker has neither)."""
    if not needle:
        return True
    return not header.is_control and any(data is not None and needle in data.lower()
                                         for data in (record.key, record.value))


def _row(engine: "Engine", header: BatchHeader, record: Record, state: dict[str, Any]) -> dict[str, Any]:
    """The records view's row (its read_committed state) with the whole record, its
    batch and the transactional id of its producer (when the coordinator knows it)."""
    return {**state, "offset": record.offset, "timestamp": record.timestamp,
            "key": record.key, "value": record.value, "headers": list(record.headers),
            "batch": _batch(header),
            "transactional_id": (engine.transactions.transactional_id_of(header.producer_id)
                                 if header.has_producer_id else None)}


async def _states(engine: "Engine", log: PartitionLog, first: int, last: int) -> dict[int, dict[str, Any]]:
    """``read_models.records``' row of each offset in ``[first, last]``, by offset."""
    view = await read_models.records(engine, log.topic, log.partition, first, limit=last - first + 1)
    return {row["offset"]: row for row in view["records"]}


async def page(engine: "Engine", topic: str, partition: int, start: int | None = None,
               before: int | None = None, limit: int = 20, text: str = "",
               read_committed: bool = False) -> dict[str, Any]:
    """Up to ``limit`` records of the partition that match ``text`` (and, with
    ``read_committed``, that a read_committed consumer receives): forward from
    ``start``, or the last ones below ``before``, or (neither) the newest. The answer
    says where the scan began and ended (``scanned_from`` .. ``scanned_to``, exclusive):
    the next page starts at ``scanned_to``, the previous one ends at ``scanned_from``.
    A view ends at ``upper_offset``: the high watermark, or the LSO for read_committed
    (what lies past it is not received yet, so no page has looked at it)."""
    log = engine.partitions.log(topic, partition)
    low, hw = log.log_start_offset, log.high_watermark
    upper = log.last_stable_offset if read_committed else hw
    limit = max(1, min(limit, MAX_LIMIT))
    needle = text.lower().encode() if text else None
    window = SCAN_LIMIT if needle or read_committed else limit
    for name, offset in (("start", start), ("before", before)):
        if offset is not None and not low <= offset <= hw:
            raise OffsetOutOfRangeError(f"{name} offset {offset} is outside [{low}, {hw}] of {topic}-{partition}")
    if start is None:
        scanned_to = end = upper if before is None else min(before, upper)
        found: list[tuple[BatchHeader, Record]] = []
        scanned_from, size = end, limit
        while len(found) < limit and low < scanned_from and end - scanned_from < window:
            chunk = max(low, scanned_from - size, end - window)  # backwards, doubling
            found = [(h, r) for h, r in _records(log, chunk, scanned_from, read_committed)
                     if _matches(h, r, needle)] + found
            scanned_from, size = chunk, size * 2
        if len(found) >= limit and window > limit:
            found = found[-limit:]
            scanned_from = found[0][1].offset
    else:
        scanned_from, scanned_to, found = start, max(start, min(upper, start + window)), []
        for header, record in _records(log, start, scanned_to, read_committed):
            if _matches(header, record, needle):
                found.append((header, record))
                if len(found) == limit:
                    scanned_to = record.offset + 1
                    break
    states = await _states(engine, log, found[0][1].offset, found[-1][1].offset) if found else {}
    return {"topic_name": topic, "partition_id": partition, "partitions_count": engine.topics.partition_count(topic),
            "log_start_offset": low, "high_watermark": hw,
            "last_stable_offset": log.last_stable_offset, "text": text, "limit": limit,
            "read_committed": read_committed, "upper_offset": upper,
            "scanned_from": scanned_from, "scanned_to": scanned_to,
            "records": [_row(engine, h, r, states[r.offset]) for h, r in found]}


async def record(engine: "Engine", topic: str, partition: int, offset: int) -> dict[str, Any]:
    """One record, its batch, its read_committed state, and who wrote it: the
    transactional id of its producer (when the coordinator still knows it), for an
    aborted record the ``.txnindex`` entry that makes consumers skip it, and for a
    transactional one the offset of the marker that ended its transaction."""
    log = engine.partitions.log(topic, partition)
    if not log.log_start_offset <= offset < log.high_watermark:
        raise OffsetOutOfRangeError(f"offset {offset} is outside [{log.log_start_offset}, "
                                    f"{log.high_watermark}) of {topic}-{partition}")
    header, found = next(_records(log, offset, offset + 1), (None, None))
    if header is None or found is None:  # compacted away
        raise OffsetOutOfRangeError(f"no record at offset {offset} of {topic}-{partition} (compacted away)")
    row = _row(engine, header, found, (await _states(engine, log, offset, offset))[offset])
    row["aborted_range"] = next(({"first_offset": t.first_offset, "last_offset": t.last_offset}
                                 for t in log.collect_aborted(offset, offset + 1)
                                 if t.producer_id == header.producer_id
                                 and t.first_offset <= offset <= t.last_offset), None)
    row["marker_offset"] = _marker_offset(log, header) if header.is_transactional and not header.is_control else None
    row.update(topic_name=topic, partition_id=partition, log_start_offset=log.log_start_offset,
               last_stable_offset=log.last_stable_offset, high_watermark=log.high_watermark)
    return row


def _marker_offset(log: PartitionLog, batch: BatchHeader) -> int | None:
    """Where the marker that ended the transaction of ``batch`` is: the first control
    batch of its producer after it, within :data:`MARKER_SEARCH_BATCHES` batches (None:
    not found there, or the transaction is still open)."""
    for n, (header, _) in enumerate(log.batches(batch.next_offset)):
        if n == MARKER_SEARCH_BATCHES or header.base_offset >= log.high_watermark:
            return None
        if header.is_control and header.producer_id == batch.producer_id:
            return header.base_offset
    return None
