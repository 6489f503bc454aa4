"""Running counts of the records a read_committed consumer receives, per partition.

A group's lag (``app/engine/queries.py``) is the number of records a read_committed
consumer at its committed position would still receive up to the LSO: the data
records in ``[position, LSO)``, markers and records of aborted transactions not
counted. Counting that by walking batch headers costs the engine's loop time per
batch on every console refresh and every ``/metrics`` scrape; this index keeps the
answer instead, maintained as the log changes:

* one slot per stored batch, in offset order: its base offset, its end (next offset)
  and its *weight* -- the records it gives a reader that does not skip it: its
  RecordCount for a data batch, 0 for a control batch (a marker);
* a Fenwick tree (binary indexed tree) over the weights, so the records in any run of
  slots is two O(log n) prefix sums;
* per producer with an open transaction, the base offsets of that transaction's
  batches. A transactional batch counts from its append (the records from the LSO on
  -- ``held_back`` -- include open ones); an ABORT marker zeroes the weights of its
  transaction's batches, O(log n) each; a COMMIT only forgets them.

Below the LSO every transaction is decided, so ``count(position, LSO)`` is exact.

Updates: :meth:`append` per batch (O(log n)), :meth:`end_transaction` per marker
(O(batches of the transaction x log n)), :meth:`drop_before` when retention moves the
log start (O(log n), with an O(n) compaction of the arrays once half of them is
dropped: amortised O(1) per batch), :meth:`replace` when the log cleaner swaps in a
cleaned segment (O(n): cleaning is rare). Rebuilt on open (:meth:`build`) from the
batch headers and the ``.txnindex`` aborted ranges.

Memory: four 8-byte integers per batch held, in ``array('q')`` -- 32 bytes a batch,
for at most twice the batches the log holds (dropped slots are compacted away once
they are half of the arrays), plus one offset per batch of each open transaction.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from typing import Iterable

from storage.record_batch import BatchHeader
from storage.txn_index import AbortedTxn

#: dropped slots are compacted away once they are this many and half of the arrays
_COMPACT_AT_LEAST = 1024


class VisibleRecordIndex:
    """The records each batch of one partition gives a read_committed reader, summed on demand."""

    def __init__(self) -> None:
        self._bases = array("q")
        self._ends = array("q")
        self._weights = array("q")
        self._tree = array("q", [0])  # Fenwick tree over _weights, 1-based
        self._first = 0  # slots before it were dropped by retention
        #: producer id -> base offsets of the batches of its open transaction
        self._open: dict[int, list[int]] = {}

    def __len__(self) -> int:
        """Batches held (dropped ones not counted)."""
        return len(self._bases) - self._first

    # -- building -------------------------------------------------------------------------

    @classmethod
    def build(cls, headers: Iterable[BatchHeader], aborted: Iterable[AbortedTxn],
              ongoing: Iterable[tuple[int, int]]) -> "VisibleRecordIndex":
        """The index of a log opened from disk: its batch ``headers`` in offset order,
        the ``.txnindex`` entries of its segments (``aborted``) and the open
        transactions of its producer state (``ongoing``: producer id, first offset)."""
        ranges: dict[int, list[AbortedTxn]] = defaultdict(list)
        for txn in sorted(aborted, key=lambda t: t.first_offset):
            ranges[txn.producer_id].append(txn)
        firsts = {pid: [t.first_offset for t in txns] for pid, txns in ranges.items()}
        open_from = dict(ongoing)
        index = cls()
        for header in headers:
            weight = 0 if header.is_control else header.record_count
            if header.is_transactional and not header.is_control:
                pid = header.producer_id
                if _in_aborted(header.base_offset, firsts.get(pid, []), ranges.get(pid, [])):
                    weight = 0
                elif pid in open_from and header.base_offset >= open_from[pid]:
                    index._open.setdefault(pid, []).append(header.base_offset)
            index._slot(header.base_offset, header.next_offset, weight)
        index._rebuild_tree()
        return index

    # -- updates ----------------------------------------------------------------------------

    def append(self, header: BatchHeader) -> None:
        """A batch appended at the log end (data or marker)."""
        weight = 0 if header.is_control else header.record_count
        if header.is_transactional and not header.is_control:
            self._open.setdefault(header.producer_id, []).append(header.base_offset)
        self._slot(header.base_offset, header.next_offset, weight)
        n = len(self._weights)  # the new slot's 1-based index: its node covers (n - lowbit, n]
        self._tree.append(weight + self._prefix(n - 1) - self._prefix(n - (n & -n)))

    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id``: an abort takes its transaction's
        records back out of the counts."""
        for base in self._open.pop(producer_id, ()):
            if not commit:
                i = bisect.bisect_left(self._bases, base, self._first)
                if i < len(self._bases) and self._bases[i] == base:
                    self._add(i, -self._weights[i])

    def drop_before(self, offset: int) -> None:
        """Retention deleted the batches below ``offset`` (a segment base)."""
        self._first = max(self._first, bisect.bisect_left(self._bases, offset, self._first))
        if self._first >= _COMPACT_AT_LEAST and 2 * self._first >= len(self._bases):
            self._compact(self._first, self._first, ())

    def replace(self, start: int, end: int, headers: Iterable[BatchHeader]) -> None:
        """The log cleaner replaced the batches in ``[start, end)`` (all decided:
        cleaning stops below the LSO) with ``headers``: same base offsets, fewer
        records, some batches gone. A batch that counted keeps counting, with its new
        RecordCount; one that did not (a marker, aborted data) still does not."""
        lo = bisect.bisect_left(self._bases, start, self._first)
        hi = bisect.bisect_left(self._bases, end, lo)
        counted = {self._bases[i] for i in range(lo, hi) if self._weights[i] > 0}
        kept = [(h.base_offset, h.next_offset, h.record_count if h.base_offset in counted else 0)
                for h in headers]
        self._compact(lo, hi, kept)

    # -- queries ---------------------------------------------------------------------------

    def count(self, start: int, upper: int) -> tuple[int, bool]:
        """``(records, split)``: the records a reader that does not skip them receives
        from the batches holding offsets in ``[start, upper)`` (``upper`` a batch
        boundary). ``split`` is True when ``start`` falls inside a compacted batch
        (offsets with gaps) that counts: its records from ``start`` on are not in
        ``records`` and only that batch's body can tell how many there are."""
        if start >= upper:
            return 0, False
        whole = bisect.bisect_left(self._bases, start, self._first)
        hi = bisect.bisect_left(self._bases, upper, whole)
        records = self._prefix(hi) - self._prefix(whole)
        holding = whole - 1
        if holding < self._first or self._ends[holding] <= start or self._weights[holding] == 0:
            return records, False
        span = self._ends[holding] - self._bases[holding]
        if self._weights[holding] == span:  # no gaps: every offset from start on is a record
            return records + self._ends[holding] - start, False
        return records, True

    # -- the arrays ------------------------------------------------------------------------

    def _slot(self, base: int, end: int, weight: int) -> None:
        self._bases.append(base)
        self._ends.append(end)
        self._weights.append(weight)

    def _prefix(self, n: int) -> int:
        """The weights of slots ``[0, n)``."""
        total, tree = 0, self._tree
        while n > 0:
            total += tree[n]
            n &= n - 1
        return total

    def _add(self, i: int, delta: int) -> None:
        self._weights[i] += delta
        n, tree, size = i + 1, self._tree, len(self._weights)
        while n <= size:
            tree[n] += delta
            n += n & -n

    def _compact(self, lo: int, hi: int, slots: Iterable[tuple[int, int, int]]) -> None:
        """Slots ``[_first, lo)`` + ``slots`` + ``[hi, end)``, the dropped ones gone; O(n)."""
        kept = list(slots)
        first = self._first
        self._bases = self._bases[first:lo] + array("q", (s[0] for s in kept)) + self._bases[hi:]
        self._ends = self._ends[first:lo] + array("q", (s[1] for s in kept)) + self._ends[hi:]
        self._weights = self._weights[first:lo] + array("q", (s[2] for s in kept)) + self._weights[hi:]
        self._first = 0
        self._rebuild_tree()

    def _rebuild_tree(self) -> None:
        """The Fenwick tree of the weights, in O(n)."""
        tree = array("q", [0])
        tree.extend(self._weights)
        size = len(tree) - 1
        for n in range(1, size + 1):
            parent = n + (n & -n)
            if parent <= size:
                tree[parent] += tree[n]
        self._tree = tree


def _in_aborted(offset: int, firsts: list[int], txns: list[AbortedTxn]) -> bool:
    """Whether ``offset`` lies in one of a producer's aborted ranges (``txns``, sorted and
    disjoint; ``firsts`` their first offsets)."""
    i = bisect.bisect_right(firsts, offset) - 1
    return i >= 0 and offset <= txns[i].last_offset
