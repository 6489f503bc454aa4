"""What a read_committed consumer would receive from a partition: the data records
in a range (markers and aborted records not counted), from the counts the log keeps.
Pure functions of a :class:`PartitionLog`; the engine's read models
(``exactly/app/engine/read_models.py``) and the lag metrics use them on the loop.
"""

from __future__ import annotations

from exactly.storage.partition_log import PartitionLog
from exactly.storage.record_batch import decode_batch


def read_committed_lag(log: PartitionLog, position: int) -> tuple[int, bool]:
    """``(lag, exact)``: how many records a read_committed consumer at ``position``
    would still receive -- the data records in ``[position, LSO)`` (:func:`data_records`)."""
    return data_records(log, max(position, log.log_start_offset), log.last_stable_offset)


def data_records(log: PartitionLog, start: int, upper: int) -> tuple[int, bool]:
    """``(count, exact)``: the data records in ``[start, upper)`` that are not aborted
    -- neither control records (markers) nor records of an aborted transaction --
    from the counts the log keeps as batches and markers arrive
    (``exactly/storage/visible_records.py``): O(log n), no batch read, except the one
    compacted batch that ``start`` may split, whose records from ``start`` on only its
    body can tell. ``exact`` is False only for a while after the broker started:
    until the batches it opened with are counted (a background read of their
    headers), they count one record per offset, an upper bound."""
    count, split, exact = log.count_visible(start, upper)
    if split:
        count += sum(1 for record in decode_batch(log.read(start, 0).records).records if record.offset >= start)
    return count, exact

