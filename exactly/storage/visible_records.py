"""Running counts of the records a read_committed consumer receives, per partition.

A group's lag (``exactly/storage/visibility.py``) is the number of records a read_committed
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
pieces in between; an append O(log k); an abort O(batches of the transaction x log k);
retention drops whole segments' counts (O(1) each); a cleaned segment's counts are
built from its headers on a worker (:class:`CountSegment`, run by the job that closes
the segments it replaced) and put in place of theirs by the first use after it ran
(:meth:`VisibleRecordIndex.settle`).

Opening a log reads no batch for this: what it opened with is :class:`Uncounted`, one
range per segment, and the owner has it counted off its thread afterwards
(``PartitionLog.count_visible``: a :class:`CountSegment` per range, installed by
:meth:`VisibleRecordIndex.install`, which also applies the markers that came for the
transactions it saw open). Until then a count through an uncounted range takes one
record per offset -- an upper bound -- and says it is not exact.

Memory: three 8-byte integers per batch the log holds plus the Fenwick tree's one, in
``array('q')`` -- about 32 bytes a batch -- and one offset per batch of each open
transaction; a segment's counts go with the segment.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from exactly.storage.aborted_transactions import AbortedTransactionTracker
from exactly.storage.record_batch import BatchHeader
from exactly.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from exactly.storage.segment import LogSegment


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


def weight(header: BatchHeader, aborted: AbortedTransactionTracker) -> int:
    """What a batch of a log read from disk gives a read_committed reader: 0 for a
    marker or data of an aborted transaction, its RecordCount otherwise. Every batch
    goes through ``aborted`` in offset order, markers included."""
    if aborted.is_aborted(header) or header.is_control:
        return 0
    return header.record_count


class CountSegment:
    """A job: the counts of the batches of ``segment`` based in ``[start, end)``, from
    their headers and the log's ``.txnindex`` entries (``aborted``) and open
    transactions (``ongoing``: producer id -> first offset), all captured on the
    owner's thread; ``run`` may execute on any thread and leaves the counts in
    ``counts`` and the batches of the open transactions in ``open_bases`` (``counts``
    stays None if the segment could not be read: retention took it meanwhile)."""

    def __init__(self, segment: "LogSegment", start: int, end: int, aborted: list[AbortedTxn],
                 ongoing: dict[int, int] | None = None, marker_seq: int = 0) -> None:
        self.segment, self.start, self.end = segment, start, end
        self.aborted, self.ongoing, self.marker_seq = aborted, ongoing or {}, marker_seq
        self.done = False
        self.counts: SegmentCounts | None = None
        self.open_bases: dict[int, list[int]] = {}

    def run(self) -> None:
        try:
            aborted = AbortedTransactionTracker.of(self.aborted)
            self.counts = SegmentCounts.of(self.start, ((h.base_offset, h.next_offset, weight(h, aborted))
                                                        for h in self._headers()))
        except OSError:  # closed meanwhile: nothing to install
            pass
        finally:
            self.done = True

    def _headers(self) -> Iterator[BatchHeader]:
        for location in self.segment.headers_from():
            header = location.header
            if header.base_offset >= self.end:
                return
            if header.base_offset < self.start:
                continue
            if (header.is_transactional and not header.is_control
                    and header.base_offset >= self.ongoing.get(header.producer_id, self.end)):
                self.open_bases.setdefault(header.producer_id, []).append(header.base_offset)
            yield header


@dataclass(frozen=True, slots=True)
class Uncounted:
    """Offsets ``[base_offset, end)`` of a log opened from disk whose batches are not
    counted yet: a count through them is an upper bound (one record per offset)."""

    base_offset: int
    end: int


class VisibleRecordIndex:
    """The records each batch of one partition gives a read_committed reader, summed on demand.

    A log opened from disk starts with its batches :class:`Uncounted`, one range per
    segment: counting them means reading every batch header, which the owner does
    off its thread (:meth:`uncounted`, :meth:`install`) rather than on open."""

    def __init__(self) -> None:
        self._pieces: list[SegmentCounts | Uncounted] = []
        self._bases: list[int] = []  # the pieces' base offsets
        #: producer id -> base offsets of the batches of its open transaction (counted ones)
        self._open: dict[int, list[int]] = {}
        #: COMMIT and ABORT markers so far, and the last one of each producer: (its number, commit)
        self._marker_seq = 0
        self._ended: dict[int, tuple[int, bool]] = {}
        #: cleaned segments' counts to put in place of ``[start, end)`` once their job ran
        self._pending: list[tuple[int, int, CountSegment]] = []

    def __len__(self) -> int:
        """Batches counted."""
        self.settle()
        return sum(len(piece) for piece in self._pieces if isinstance(piece, SegmentCounts))

    @classmethod
    def opened(cls, ranges: Iterable[tuple[int, int]]) -> "VisibleRecordIndex":
        """The index of a log opened from disk: the ``(base offset, end)`` of each
        segment's batches, in offset order, all uncounted."""
        index = cls()
        for base, end in ranges:
            if end > base:
                index._pieces.append(Uncounted(base, end))
                index._bases.append(base)
        return index

    # -- updates ----------------------------------------------------------------------------

    def append(self, header: BatchHeader, segment_base: int) -> None:
        """A batch appended at the log end (data or marker) of the segment ``segment_base``."""
        if not self._pieces or isinstance(self._pieces[-1], Uncounted) or self._bases[-1] < segment_base:
            self._pieces.append(SegmentCounts(header.base_offset))
            self._bases.append(header.base_offset)
        if header.is_transactional and not header.is_control:
            self._open.setdefault(header.producer_id, []).append(header.base_offset)
        piece = self._pieces[-1]
        assert isinstance(piece, SegmentCounts)
        piece.append(header.base_offset, header.next_offset, 0 if header.is_control else header.record_count)

    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id``: an abort takes its transaction's
        records back out of the counts."""
        self.settle()
        self._marker_seq += 1
        self._ended[producer_id] = (self._marker_seq, commit)
        if not commit:
            self._zero(self._open.get(producer_id, ()))
        self._open.pop(producer_id, None)

    def drop_before(self, offset: int) -> None:
        """Retention deleted the segments based below ``offset``."""
        self.settle()
        k = bisect.bisect_left(self._bases, offset)
        del self._pieces[:k], self._bases[:k]

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
                self._pieces[lo:hi] = [job.counts]
                self._bases[lo:hi] = [start]

    # -- counting what was opened ------------------------------------------------------------

    def uncounted(self) -> list[Uncounted]:
        """The ranges still to count, oldest first."""
        return [piece for piece in self._pieces if isinstance(piece, Uncounted)]

    @property
    def marker_seq(self) -> int:
        """How many COMMIT and ABORT markers came so far (a :class:`CountSegment` notes it)."""
        return self._marker_seq

    def install(self, job: CountSegment) -> None:
        """Put the counts of ``job`` (run) in place of its uncounted range, if that is still
        there; the open transactions it saw that ended since it was planned end here too."""
        self.settle()
        i = bisect.bisect_left(self._bases, job.start)
        if job.counts is None or i == len(self._bases) or self._pieces[i] != Uncounted(job.start, job.end):
            return
        self._pieces[i] = job.counts
        for pid, bases in job.open_bases.items():
            seq, commit = self._ended.get(pid, (0, True))
            if seq <= job.marker_seq:  # still open: its abort zeroes these too
                self._open[pid] = sorted(bases + self._open.get(pid, []))
            elif not commit:
                self._zero(bases)

    # -- queries ---------------------------------------------------------------------------

    def count(self, start: int, upper: int) -> tuple[int, bool, bool]:
        """``(records, split, exact)``: the records a reader that does not skip them
        receives from the batches holding offsets in ``[start, upper)`` (``upper`` a
        batch boundary). ``split`` is True when ``start`` falls inside a compacted batch
        (offsets with gaps) that counts: its records from ``start`` on are not in
        ``records`` and only that batch's body can tell how many there are. ``exact``
        is False when the range crosses batches not counted yet: they count one record
        per offset, an upper bound."""
        self.settle()
        if start >= upper or not self._pieces:
            return 0, False, True
        first = max(0, bisect.bisect_right(self._bases, start) - 1)
        last = max(0, bisect.bisect_right(self._bases, upper - 1) - 1)
        records, split, exact = 0, False, True
        for i in range(first, last + 1):
            piece = self._pieces[i]
            if isinstance(piece, Uncounted):
                records += max(0, min(upper, piece.end) - max(start, piece.base_offset))
                exact = False
            elif i == first:
                records, split = piece.count(start, upper)
            elif i == last:
                records += piece.before(upper)
            else:
                records += piece.total
        return records, split, exact

    def _zero(self, bases: Iterable[int]) -> None:
        for base in bases:
            i = bisect.bisect_right(self._bases, base) - 1
            if i >= 0 and isinstance(piece := self._pieces[i], SegmentCounts):
                piece.zero(base)
