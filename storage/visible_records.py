"""Running counts of the records a read_committed consumer receives, per partition.

A group's lag (``app/engine/queries.py``) is the number of records a read_committed
consumer at its committed position would still receive up to the LSO: the data
records in ``[position, LSO)``, markers and records of aborted transactions not
counted. Counting that by walking batch headers costs the engine's loop time per
batch on every console refresh and every ``/metrics`` scrape; this index keeps the
answer instead, maintained as the log changes.

Per segment (:class:`SegmentCounts`), one slot per batch in offset order: its base
offset, its end (next offset) and its *weight* -- the records it gives a reader that
does not skip it: its RecordCount for a data batch, 0 for a control batch (a marker)
and for data of an aborted transaction -- with a Fenwick tree (binary indexed tree)
over the weights and their total. A transactional batch counts from its append (the
records from the LSO on -- ``held_back`` -- include open ones); the index remembers,
per producer with an open transaction, its batches' base offsets, and an ABORT marker
zeroes their weights (O(log k) each; a COMMIT only forgets them). Below the LSO every
transaction is decided, so a count up to the LSO is exact.

Costs: a count is two bisects and two Fenwick prefix sums, plus the totals of the
segments in between (a C-speed sum over a list slice); an append O(log k); an abort
O(batches of the transaction x log k); retention drops whole segments' counts (O(1)
each); a cleaned segment's counts are built from its headers on a worker
(:class:`CountSegment`, run by the job that closes the segments it replaced) and put
in place of theirs by the first use after it ran (:meth:`VisibleRecordIndex.settle`).
Opening a log builds the counts from its batch headers and its ``.txnindex`` entries
(:meth:`VisibleRecordIndex.build`), O(batches).

Memory: three 8-byte integers per batch the log holds plus the Fenwick tree's one, in
``array('q')`` -- about 32 bytes a batch -- and one offset per batch of each open
transaction; a segment's counts go with the segment.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable

from storage.record_batch import BatchHeader
from storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from storage.segment import LogSegment


class SegmentCounts:
    """The weights of one segment's batches, with their Fenwick tree and total."""

    __slots__ = ("base_offset", "bases", "ends", "weights", "tree", "total")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.bases, self.ends, self.weights = array("q"), array("q"), array("q")
        self.tree = array("q", [0])  # 1-based: node n covers slots (n - lowbit(n), n]
        self.total = 0

    @classmethod
    def of(cls, base_offset: int, slots: Iterable[tuple[int, int, int]]) -> "SegmentCounts":
        """Counts of ``(base offset, end, weight)`` slots in offset order, built in O(k)."""
        counts = cls(base_offset)
        for base, end, weight in slots:
            counts.bases.append(base)
            counts.ends.append(end)
            counts.weights.append(weight)
        tree = counts.tree
        tree.extend(counts.weights)
        size = len(tree) - 1
        for n in range(1, size + 1):
            if (parent := n + (n & -n)) <= size:
                tree[parent] += tree[n]
        counts.total = sum(counts.weights)
        return counts

    def __len__(self) -> int:
        return len(self.bases)

    def append(self, base: int, end: int, weight: int) -> None:
        self.bases.append(base)
        self.ends.append(end)
        self.weights.append(weight)
        n = len(self.weights)
        self.tree.append(weight + self._prefix(n - 1) - self._prefix(n - (n & -n)))
        self.total += weight

    def zero(self, base: int) -> None:
        """The batch at ``base`` no longer counts (its transaction aborted)."""
        i = bisect.bisect_left(self.bases, base)
        if i == len(self.bases) or self.bases[i] != base or not self.weights[i]:
            return
        delta, n, size = -self.weights[i], i + 1, len(self.weights)
        self.weights[i] = 0
        self.total += delta
        while n <= size:
            self.tree[n] += delta
            n += n & -n

    def before(self, upper: int) -> int:
        """The weights of the batches based below ``upper``."""
        return self._prefix(bisect.bisect_left(self.bases, upper))

    def count(self, start: int, upper: int) -> tuple[int, bool]:
        """``(records, split)`` for the batches based in ``[start, upper)`` and the one
        holding ``start`` (see :meth:`VisibleRecordIndex.count`)."""
        whole = bisect.bisect_left(self.bases, start)
        records = self.before(upper) - self._prefix(whole)
        holding = whole - 1
        if holding < 0 or self.ends[holding] <= start or not self.weights[holding]:
            return records, False
        if self.weights[holding] == self.ends[holding] - self.bases[holding]:  # no gaps in its offsets
            return records + self.ends[holding] - start, False
        return records, True

    def _prefix(self, n: int) -> int:
        """The weights of slots ``[0, n)``."""
        total, tree = 0, self.tree
        while n > 0:
            total += tree[n]
            n &= n - 1
        return total


class Weigher:
    """What each batch of a log read from disk weighs: 0 for a marker or data of an
    aborted transaction (the ``.txnindex`` ranges), its RecordCount otherwise."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._ranges: dict[int, list[AbortedTxn]] = defaultdict(list)
        for txn in sorted(aborted, key=lambda t: t.first_offset):
            self._ranges[txn.producer_id].append(txn)
        self._firsts = {pid: [t.first_offset for t in txns] for pid, txns in self._ranges.items()}

    def weight(self, header: BatchHeader) -> int:
        if header.is_control:
            return 0
        if header.is_transactional and header.producer_id in self._ranges:
            txns = self._ranges[header.producer_id]
            i = bisect.bisect_right(self._firsts[header.producer_id], header.base_offset) - 1
            if i >= 0 and header.base_offset <= txns[i].last_offset:
                return 0
        return header.record_count

    def counts(self, base_offset: int, headers: Iterable[BatchHeader]) -> SegmentCounts:
        return SegmentCounts.of(base_offset, ((h.base_offset, h.next_offset, self.weight(h)) for h in headers))


class CountSegment:
    """A job: the counts of a segment the log cleaner wrote, from its batch headers and
    the log's ``.txnindex`` entries (captured on the owner's thread); ``run`` may
    execute on any thread and leaves them in ``counts`` (None until then, or if the
    segment could not be read: the replaced counts then stay)."""

    def __init__(self, segment: "LogSegment", aborted: list[AbortedTxn]) -> None:
        self.segment, self.aborted = segment, aborted
        self.done = False
        self.counts: SegmentCounts | None = None

    def run(self) -> None:
        try:
            self.counts = Weigher(self.aborted).counts(
                self.segment.base_offset, (location.header for location in self.segment.headers_from()))
        except OSError:  # closed meanwhile (retention took it): nothing to install
            pass
        finally:
            self.done = True


class VisibleRecordIndex:
    """The records each batch of one partition gives a read_committed reader, summed on demand."""

    def __init__(self) -> None:
        self._segments: list[SegmentCounts] = []
        self._bases: list[int] = []  # the segments' base offsets
        #: producer id -> base offsets of the batches of its open transaction
        self._open: dict[int, list[int]] = {}
        #: cleaned segments' counts to put in place of ``[start, end)`` once their job ran
        self._pending: list[tuple[int, int, CountSegment]] = []

    def __len__(self) -> int:
        """Batches counted."""
        self.settle()
        return sum(len(counts) for counts in self._segments)

    @classmethod
    def build(cls, segments: Iterable[tuple[int, Iterable[BatchHeader]]], aborted: Iterable[AbortedTxn],
              ongoing: Iterable[tuple[int, int]]) -> "VisibleRecordIndex":
        """The index of a log opened from disk: each segment's base offset and batch
        headers, in offset order; the ``.txnindex`` entries of its segments
        (``aborted``); the open transactions of its producer state (``ongoing``:
        producer id, first offset)."""
        index, weigher, open_from = cls(), Weigher(aborted), dict(ongoing)

        def noting_open(headers: Iterable[BatchHeader]) -> Iterable[BatchHeader]:
            for header in headers:
                pid = header.producer_id
                if header.is_transactional and not header.is_control and header.base_offset >= open_from.get(
                        pid, header.base_offset + 1):
                    index._open.setdefault(pid, []).append(header.base_offset)
                yield header

        for base_offset, headers in segments:
            index._segments.append(weigher.counts(base_offset, noting_open(headers)))
            index._bases.append(base_offset)
        return index

    # -- updates ----------------------------------------------------------------------------

    def append(self, header: BatchHeader, segment_base: int) -> None:
        """A batch appended at the log end (data or marker) of the segment ``segment_base``."""
        if not self._bases or self._bases[-1] != segment_base:
            self._segments.append(SegmentCounts(segment_base))
            self._bases.append(segment_base)
        if header.is_transactional and not header.is_control:
            self._open.setdefault(header.producer_id, []).append(header.base_offset)
        self._segments[-1].append(header.base_offset, header.next_offset,
                                  0 if header.is_control else header.record_count)

    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id``: an abort takes its transaction's
        records back out of the counts."""
        self.settle()
        for base in self._open.pop(producer_id, ()):
            if not commit:
                self._segments[bisect.bisect_right(self._bases, base) - 1].zero(base)

    def drop_before(self, offset: int) -> None:
        """Retention deleted the segments based below ``offset``."""
        self.settle()
        k = bisect.bisect_left(self._bases, offset)
        del self._segments[:k], self._bases[:k]

    def replace_when_counted(self, start: int, end: int, job: CountSegment) -> None:
        """The log cleaner swapped one segment in for those based in ``[start, end)``;
        ``job`` counts it (on a worker) and its counts replace theirs once it has run."""
        self._pending.append((start, end, job))

    def settle(self) -> None:
        """Put in place the cleaned segments' counts whose jobs have run, in order."""
        while self._pending and self._pending[0][2].done:
            start, end, job = self._pending.pop(0)
            lo, hi = bisect.bisect_left(self._bases, start), bisect.bisect_left(self._bases, end)
            if job.counts is not None and lo < hi and self._bases[lo] == start:
                self._segments[lo:hi] = [job.counts]
                self._bases[lo:hi] = [start]

    # -- queries ---------------------------------------------------------------------------

    def count(self, start: int, upper: int) -> tuple[int, bool]:
        """``(records, split)``: the records a reader that does not skip them receives
        from the batches holding offsets in ``[start, upper)`` (``upper`` a batch
        boundary). ``split`` is True when ``start`` falls inside a compacted batch
        (offsets with gaps) that counts: its records from ``start`` on are not in
        ``records`` and only that batch's body can tell how many there are."""
        self.settle()
        if start >= upper or not self._segments:
            return 0, False
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        last = max(0, bisect.bisect_right(self._bases, upper - 1) - 1)
        records, split = self._segments[first].count(start, upper)
        if last > first:
            records += sum(counts.total for counts in self._segments[first + 1:last])
            records += self._segments[last].before(upper)
        return records, split
