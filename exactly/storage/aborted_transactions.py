"""Which transactional batches were aborted: the read_committed consumer's walk.

One algorithm answers "is this batch aborted?" everywhere -- the fetch path's
records (``exactly/storage/read_committed.py``), the log cleaner's "drop aborted data"
(``exactly/storage/log_cleaner.py``), the lag counts (``exactly/storage/visible_records.py``) and
the console's record rows (``exactly/app/engine/read_models.py``). It is Kafka's consumer
(``Fetcher.CompletedFetch``: ``abortedTransactions``, ``abortedProducerIds``):

1. the aborted transactions ``(producer id, first offset)`` that overlap the
   batches -- a fetch response's, or the ``.txnindex`` entries -- go into a
   min-heap by first offset;
2. batches are fed in offset order, markers included; before each batch with a
   producer id, every heap entry with a first offset <= the batch's last offset
   moves its producer to the set of aborted producers;
3. a transactional data batch of a producer in that set is aborted;
4. an ABORT marker removes its producer from the set.

A walk that reads only batch headers cannot tell an ABORT marker from a COMMIT
one; it does not need to: the next marker a producer writes ends its current
transaction, so a marker of a producer in the set is that transaction's ABORT.
"""

from __future__ import annotations

import heapq
from typing import Iterable

from exactly.storage.record_batch import BatchHeader
from exactly.storage.txn_index import AbortedTxn


class AbortedTransactionTracker:
    """Feed it every batch of a range in offset order (:meth:`is_aborted`); it says
    which are data of an aborted transaction."""

    __slots__ = ("_heap", "_producers")

    def __init__(self, aborted: Iterable[tuple[int, int]] = ()) -> None:
        """``aborted``: ``(producer id, first offset)`` of the aborted transactions
        overlapping the range, as a fetch response carries them."""
        self._heap = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._heap)
        self._producers: set[int] = set()

    @classmethod
    def of(cls, txns: Iterable[AbortedTxn]) -> AbortedTransactionTracker:
        """The tracker of ``.txnindex`` entries (``PartitionLog.collect_aborted``)."""
        return cls((txn.producer_id, txn.first_offset) for txn in txns)

    def is_aborted(self, header: BatchHeader, abort_marker: bool | None = None) -> bool:
        """Whether the batch is data of an aborted transaction. For a marker (never
        aborted data), ``abort_marker`` says whether it is an ABORT; None (a walk over
        headers only) takes it for one when its producer's transaction is aborted."""
        if not header.has_producer_id:
            return False
        producer_id = header.producer_id
        heap = self._heap
        while heap and heap[0][0] <= header.last_offset:
            self._producers.add(heapq.heappop(heap)[1])
        if header.is_control:
            if abort_marker is not False:
                self._producers.discard(producer_id)
            return False
        return header.is_transactional and producer_id in self._producers
