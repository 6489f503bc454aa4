"""The exactly-once audit: did group G turn input topic T into output topic U exactly once?

Computed from the durable logs, off the engine's loop: on the loop :func:`audit` only
takes views of the logs (``exactly.storage.log_scan.view_of``: duplicated descriptors); it
reads them on the caller's thread. What it reads:

* the group's ``__consumer_offsets`` partition: its offset commits for T, inside a
  producer's transaction (sealed by that producer's COMMIT or ABORT marker) or outside
  any (``exactly.coordinator.offsets_chain.group_commits``);
* every ``__transaction_state`` partition: the decided transactions (PrepareCommit /
  PrepareAbort, with the partitions they span and why an abort happened), which tie
  a producer's span on the offsets partition to its spans on U
  (``exactly.coordinator.offsets_chain.match_spans``: a transaction is a producer id, an epoch
  and its span up to the marker on each partition, whatever epoch bumps and producer
  id reuse happened between transactions);
* every partition of U and of T: which input records a read_committed consumer
  receives (plain ones and committed ones; aborted ones it skips: from the batch
  headers, records decoded only where compaction left holes), and -- when the first
  data batch of an output partition names its input records -- which input
  record each output record names (``exactly.app.lineage``).

The input is audited to its end: every partition of T from its log start offset up to
its high watermark, or up to the offset ``until`` gives for it. The verdict holds when
none of these :class:`ViolationKind` is found:

* the committed transactions chain per input partition, in COMMIT-marker order, each
  advancing the committed offset ``[from, to)``; the chain starts at T's log start
  offset (Kafka's ``earliest``: an application starting from the log start must
  cover from there). A link that moves the committed offset back re-covers
  ``[to, from)``: DUPLICATE; one past T's high watermark skips offsets that do not
  exist yet: GAP. Input records after the chain's end (and after any plain commit)
  up to the audited end are a GAP, "not processed yet": an application that stopped
  early fails the audit.
* the output per transaction, in one of three modes, the strongest the output allows:

  - **lineage** (the output names its input records: the ``exactly.input`` header
    on the first record of an output partition): each input record a read_committed consumer receives has exactly one
    committed output record naming it (``records_per_input`` of them), written by the
    transaction that committed its offset. None: GAP; more, or in several
    transactions: DUPLICATE; in another transaction than the one that committed the
    offset: OUTPUT_WITHOUT_OFFSETS (a crash between the two loses or repeats it);
    output naming an input record no read_committed consumer receives (aborted,
    or past the end): OUTPUT_WITHOUT_INPUT.
  - **records_per_input** (the outputs a transform writes per input record: 1 for a
    1:1 transform): a transaction that wrote fewer records than its input ranges hold,
    all its input partitions together, skipped input (GAP), more: DUPLICATE.
  - **offsets only**: a transaction that wrote output but advanced no input offset
    wrote it for input already covered: DUPLICATE. A skipped batch or aborted input
    processed cannot be seen from offsets alone.
* an offset commit of the group for T outside any transaction (a plain OffsetCommit):
  OFFSETS_OUTSIDE_TRANSACTION;
* a data batch on U without the transactional bit: OUTPUT_OUTSIDE_TRANSACTION;
  output of an aborted transaction is fine -- its ABORT marker, and the ``.txnindex``
  entry it made, hide it from read_committed consumers (a read_uncommitted consumer
  sees it: the guarantee is read_committed's); output of a transaction still open
  is undecided: UNDECIDED_TRANSACTION (audit an application that has stopped);
* a committed span on U whose transaction committed no offsets of the group for T
  (or whose transaction the transaction log no longer names): OUTPUT_WITHOUT_OFFSETS.

Every violation names a non-empty range of offsets, and the likely cause in the
application where the logs show one (input of aborted transactions in the range:
``isolation.level``; output for the record at the committed offset: offsets must be
the next offset to consume; an aborted attempt over the skipped input: rewind after
an abort). Aborted attempts that touched the group's offsets or U are listed with the
cause the transaction log keeps for them (``AbortCause``). Compaction of the internal
topics removes history: only transactions still in their logs are audited exactly.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from exactly.app import lineage
from exactly.coordinator import offsets_chain, offsets_log, transaction_log
from exactly.coordinator.offsets_chain import DecidedTransaction, GroupCommits, GroupTransaction, Link
from exactly.storage.errors import InvalidRequestError, UnknownTopicOrPartitionError
from exactly.storage.log_scan import LogView, Marker, PartitionScan, TransactionSpan, scan, view_of
from exactly.storage.record_batch import BatchHeader, ControlType, Record

if TYPE_CHECKING:
    from exactly.app.engine import Engine


class ViolationKind(enum.Enum):
    """What broke exactly-once; ``value`` is what the API, the CLI and the mirror show."""

    GAP = "GAP"
    """Input records no committed transaction processed: skipped, or not processed yet."""
    DUPLICATE = "DUPLICATE"
    """Input records more than one committed transaction (or output record) covers."""
    OFFSETS_OUTSIDE_TRANSACTION = "OFFSETS_OUTSIDE_TRANSACTION"
    """An offset commit outside any transaction (a plain OffsetCommit)."""
    OUTPUT_OUTSIDE_TRANSACTION = "OUTPUT_OUTSIDE_TRANSACTION"
    """Output records written without a transaction."""
    OUTPUT_WITHOUT_OFFSETS = "OUTPUT_WITHOUT_OFFSETS"
    """Committed output whose transaction did not commit its input's offsets."""
    OUTPUT_WITHOUT_INPUT = "OUTPUT_WITHOUT_INPUT"
    """Committed output naming an input record no read_committed consumer receives."""
    UNDECIDED_TRANSACTION = "UNDECIDED_TRANSACTION"
    """Output or offsets of a transaction still open."""


#: what each mode checks, and what it cannot see (``AuditView.checked``)
MODES = {
    "lineage": f"each input record against the committed output records naming it (the {lineage.HEADER} header)",
    "records_per_input": "the offsets, and {n} output record(s) per input record in each transaction",
    "offsets": (f"the offsets only: a skipped batch or aborted input processed cannot be seen (records_per_input, "
                f"or the {lineage.HEADER} header on the output, sees them)"),
}

#: the likely causes the audit names beside a violation
ISOLATION_LEVEL = ("the input holds records of aborted transactions, which a read_committed consumer skips: "
                    "the application consumes with isolation.level=read_uncommitted")
NEXT_OFFSET = ("offsets must be the next offset to consume (the last processed offset + 1), not the offset of the "
               "last record processed")
NO_REWIND = ("after abort_transaction the consumer must seek back to the committed offsets: the aborted batch was "
             "never read again")
ZOMBIE = ("two producers processed the same input: an instance whose transactional.id differs is never fenced "
          "(a zombie after a rebalance)")
UNPAIRED = ("committed output whose transaction committed no offsets may have processed them: offsets must be "
            "sent with send_offsets_to_transaction in the transaction that writes the output")
PLAIN_COMMIT = ("offsets must be sent with send_offsets_to_transaction, in the transaction that writes the output, "
                "never with consumer.commit()")


@dataclass(frozen=True, slots=True)
class Violation:
    kind: ViolationKind
    topic: str
    partition: int
    #: the offsets that broke it: ``[start_offset, end_offset)``, never empty
    start_offset: int
    end_offset: int
    producer_id: int | None
    detail: str
    #: what in the application likely did it, when the logs show it
    likely_cause: str | None = None


@dataclass(frozen=True, slots=True)
class InputRange:
    partition: int
    from_offset: int
    to_offset: int


@dataclass(frozen=True, slots=True)
class OutputBatch:
    partition: int
    base_offset: int
    last_offset: int
    record_count: int


@dataclass(frozen=True, slots=True)
class AuditedTransaction:
    """One transaction of the group: committed (a link of the chain) or aborted."""

    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    outcome: str
    #: where its marker is on the group's ``__consumer_offsets`` partition (None: no offsets)
    offsets_marker_offset: int | None
    inputs: tuple[InputRange, ...]
    outputs: tuple[OutputBatch, ...]
    abort_cause: str | None = None
    abort_actor: str | None = None

    @property
    def output_records(self) -> int:
        return sum(batch.record_count for batch in self.outputs)


@dataclass(frozen=True, slots=True)
class InputPartition:
    partition: int
    log_start_offset: int
    high_watermark: int
    #: the offset the chain ends at (None: no committed transaction yet)
    committed_offset: int | None
    #: the audit covers the input up to here: the high watermark, or ``until``'s offset
    audited_to: int


@dataclass(frozen=True, slots=True)
class AuditView:
    group_id: str
    input_topic: str
    output_topic: str
    ok: bool
    offsets_partition: int
    partitions: tuple[InputPartition, ...]
    #: the committed transactions in COMMIT-marker order: the chain
    transactions: tuple[AuditedTransaction, ...]
    aborted: tuple[AuditedTransaction, ...]
    violations: tuple[Violation, ...]
    #: the committed output names its input records: each was checked (``exactly.app.lineage``)
    lineage: bool = False
    records_per_input: int | None = None

    @property
    def mode(self) -> str:
        """What was checked beside the offsets: ``lineage``, ``records_per_input`` or ``offsets``."""
        return "lineage" if self.lineage else "records_per_input" if self.records_per_input else "offsets"

    @property
    def checked(self) -> str:
        """What the mode checks, and what it cannot see, in words."""
        return MODES[self.mode].format(n=self.records_per_input)

    def mirror_rows(self) -> list[dict[str, object]]:
        """The SQLite mirror's ``audit_transactions`` rows of this audit (without
        ``audited_ms``): one per input partition of each transaction that committed
        offsets, or tried to."""
        return [{"group_id": self.group_id, "input_topic": self.input_topic, "output_topic": self.output_topic,
                 "input_partition": r.partition, "offsets_marker_offset": t.offsets_marker_offset,
                 "transactional_id": t.transactional_id, "producer_id": t.producer_id,
                 "producer_epoch": t.producer_epoch, "outcome": t.outcome, "from_offset": r.from_offset,
                 "to_offset": r.to_offset, "output_batches": len(t.outputs), "output_records": t.output_records,
                 "abort_cause": t.abort_cause, "audit_ok": int(self.ok)}
                for t in (*self.transactions, *self.aborted) if t.offsets_marker_offset is not None
                for r in t.inputs]


@dataclass(frozen=True, slots=True)
class _Views:
    offsets: LogView | None
    offsets_partition: int
    transaction_log: tuple[LogView, ...]
    inputs: tuple[LogView, ...]
    outputs: tuple[LogView, ...]

    def all(self) -> Iterable[LogView]:
        return (*([self.offsets] if self.offsets else []), *self.transaction_log, *self.inputs, *self.outputs)


def _take_views(engine: "Engine", group: str, input_topic: str, output_topic: str) -> _Views:
    """On the loop: views of every log the audit reads (UNKNOWN_TOPIC_OR_PARTITION for T or U)."""
    topics, partitions = engine.topics, engine.partitions
    inputs, outputs = topics.describe_topic(input_topic), topics.describe_topic(output_topic)
    offsets_partition = engine.groups.coordinator.partition_of(group)
    taken: list[LogView] = []
    try:
        def take(topic: str, numbers: Iterable[int]) -> tuple[LogView, ...]:
            views = tuple(view_of(partitions.log(topic, p)) for p in numbers)
            taken.extend(views)
            return views
        offsets = take(offsets_log.TOPIC, [offsets_partition] if topics.topic_info(offsets_log.TOPIC) else ())
        txn_topic = topics.topic_info(transaction_log.TOPIC)
        return _Views(offsets[0] if offsets else None, offsets_partition,
                      take(transaction_log.TOPIC, range(txn_topic.partitions) if txn_topic else ()),
                      take(input_topic, range(inputs.partitions)), take(output_topic, range(outputs.partitions)))
    except BaseException:
        for view in taken:
            view.close()
        raise


def audit(engine: "Engine", group: str, input_topic: str, output_topic: str,
          records_per_input: int | None = None, until: Mapping[int, int] | None = None) -> AuditView:
    """The audit of ``group`` from ``input_topic`` to ``output_topic`` (on the caller's
    thread: the files are read here, never on the loop), of each input partition up to
    its high watermark or the offset ``until`` gives for it (partition -> offset)."""
    views = engine.call(_take_views, engine, group, input_topic, output_topic)
    try:
        return _Audit(group, input_topic, output_topic, views, records_per_input, until or {}).view()
    finally:
        for view in views.all():
            view.close()


@dataclass(frozen=True, slots=True)
class _Offsets:
    """A set of offsets as sorted, disjoint ``[start, end)`` intervals: a batch's
    records are one interval, unless compaction left holes in it."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]

    @classmethod
    def of(cls, intervals: Iterable[tuple[int, int]]) -> "_Offsets":
        merged: list[list[int]] = []
        for start, end in sorted(i for i in intervals if i[0] < i[1]):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return cls(tuple(i[0] for i in merged), tuple(i[1] for i in merged))

    def within(self, start: int, end: int) -> Iterator[int]:
        """The offsets in ``[start, end)``, in order."""
        i = bisect.bisect_right(self.ends, start)
        while i < len(self.starts) and self.starts[i] < end:
            yield from range(max(self.starts[i], start), min(self.ends[i], end))
            i += 1

    def count(self, start: int, end: int) -> int:
        i, found = bisect.bisect_right(self.ends, start), 0
        while i < len(self.starts) and self.starts[i] < end:
            found += min(self.ends[i], end) - max(self.starts[i], start)
            i += 1
        return found

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self.ends, offset)
        return i < len(self.starts) and self.starts[i] <= offset


@dataclass(frozen=True, slots=True)
class _Input:
    """One input partition as a read_committed consumer receives it."""

    log_start_offset: int
    high_watermark: int
    #: the offsets it receives (plain and committed records), and those it skips (aborted)
    visible: _Offsets
    aborted: _Offsets

    @classmethod
    def of(cls, view: LogView) -> "_Input":
        """From the batch headers; the records only of batches compaction left holes in."""
        found = scan(view, with_records=_has_holes)
        visible: list[tuple[int, int]] = []
        aborted: list[tuple[int, int]] = []
        for batches, into in ((found.plain, visible),
                              *((span.batches, visible if span.marker.control_type is ControlType.COMMIT else aborted)
                                for span in found.spans if span.marker is not None)):
            for b in batches:
                into.extend(((r.offset, r.offset + 1) for r in b.records) if _has_holes(b.header) else
                            [(b.header.base_offset, b.header.last_offset + 1)])
        start = found.log_start_offset
        clip = lambda intervals: [(max(a, start), e) for a, e in intervals]  # noqa: E731
        return cls(start, found.high_watermark, _Offsets.of(clip(visible)), _Offsets.of(clip(aborted)))


def _first() -> Callable[[BatchHeader], bool]:
    """A ``with_records`` for :func:`scan` that decodes the first data batch only."""
    seen: list[BatchHeader] = []

    def first(header: BatchHeader) -> bool:
        seen.append(header)
        return len(seen) == 1
    return first


def _has_holes(header: BatchHeader) -> bool:
    """Whether compaction removed records from the middle of the batch: its offsets are not its range."""
    return header.record_count != header.last_offset - header.base_offset + 1


@dataclass(frozen=True, slots=True)
class _Written:
    """An output record that names its input record: which transaction wrote it, and where it is."""

    #: the committed transaction (None: a plain batch, or a transaction the log no
    #: longer names; aborted output is kept apart)
    transaction: DecidedTransaction | None
    producer_id: int
    partition: int
    offset: int


class _Audit:
    """One audit's scans and what it found."""

    def __init__(self, group: str, input_topic: str, output_topic: str, views: _Views,
                 records_per_input: int | None, until: Mapping[int, int]) -> None:
        self.group, self.input_topic, self.output_topic = group, input_topic, output_topic
        self.records_per_input = records_per_input
        self.offsets_partition = views.offsets_partition
        offsets = scan(views.offsets, with_records=True) if views.offsets else None
        self.commits = offsets_chain.group_commits(offsets, group, input_topic) if offsets else GroupCommits((), ())
        self.inputs = {view.partition: _Input.of(view) for view in views.inputs}
        self.ends = self._ends(until)
        # the first data batch of each output partition says whether the output names its input
        self.outputs = [scan(view, with_records=_first()) for view in views.outputs]
        self.lineage = any(lineage.of(r.headers) for s in self.outputs
                           for b in (*s.plain, *(b for span in s.spans for b in span.batches)) for r in b.records)
        if self.lineage:
            self.outputs = [scan(view, with_records=True) for view in views.outputs]
        self.decided = offsets_chain.decided_transactions(scan(view, with_records=True)
                                                          for view in views.transaction_log)
        self.matched = self._match(offsets)
        self.violations: list[Violation] = []

    def _ends(self, until: Mapping[int, int]) -> dict[int, int]:
        """Where the audit ends on each input partition (INVALID_REQUEST past the high watermark)."""
        for partition, offset in until.items():
            if partition not in self.inputs:
                raise UnknownTopicOrPartitionError(f"{self.input_topic} has no partition {partition}")
            if not 0 <= offset <= self.inputs[partition].high_watermark:
                raise InvalidRequestError(
                    f"until offset {offset} of {self.input_topic}-{partition} is outside [0, its high watermark "
                    f"{self.inputs[partition].high_watermark}]: the audit covers offsets that exist")
        return {p: until.get(p, i.high_watermark) for p, i in self.inputs.items()}

    # -- matching spans to transactions ---------------------------------------------------

    def _match(self, offsets: PartitionScan | None) -> dict[tuple[int, str, int, int], DecidedTransaction]:
        by_producer: dict[int, dict[tuple[str, int], list[TransactionSpan]]] = {}
        for partition_scan in ([offsets] if offsets else []) + self.outputs:
            for span in partition_scan.spans:
                by_producer.setdefault(span.producer_id, {}).setdefault(
                    (partition_scan.topic, partition_scan.partition), []).append(span)
        matched = {}
        for producer_id, spans in by_producer.items():
            matched.update(offsets_chain.match_spans(self.decided.get(producer_id, []), spans))
        return matched

    def _decided(self, topic: str, partition: int, span: TransactionSpan) -> DecidedTransaction | None:
        if span.marker is None:
            return None
        return self.matched.get((span.producer_id, topic, partition, span.marker.offset))

    def _output_spans(self, outcome: ControlType) -> Iterator[tuple[PartitionScan, TransactionSpan, Marker]]:
        """The output's spans with data that ``outcome`` sealed, with their marker."""
        for s in self.outputs:
            for span in s.spans:
                if span.batches and span.marker is not None and span.marker.control_type is outcome:
                    yield s, span, span.marker

    def _outputs_of(self, decided: DecidedTransaction | None) -> tuple[OutputBatch, ...]:
        if decided is None:
            return ()
        return tuple(batch for s in self.outputs for span in s.spans
                     if self._decided(s.topic, s.partition, span) is decided
                     for batch in _output_batches(s.partition, span))

    # -- the verdict ----------------------------------------------------------------------

    def view(self) -> AuditView:
        links = offsets_chain.chain(self.commits, {p: i.log_start_offset for p, i in self.inputs.items()})
        committed = self._committed(links)
        aborted = self._aborted(links)
        self._check_plain_commits(links)
        self._check_outputs(committed)
        self._check_undecided()
        written = self._written() if self.lineage else None
        if written is not None:
            _Lineage(self, links, committed, aborted, *written).check()
        else:
            for audited, _ in committed:
                self._check_counts(audited, aborted)
            self._check_ends(links)
        partitions = tuple(InputPartition(p, i.log_start_offset, i.high_watermark,
                                          links[p][-1].to_offset if links.get(p) else None, self.ends[p])
                           for p, i in sorted(self.inputs.items()))
        return AuditView(self.group, self.input_topic, self.output_topic, not self.violations,
                         self.offsets_partition, partitions, tuple(t for t, _ in committed), aborted,
                         tuple(self.violations), written is not None, self.records_per_input)

    def _violation(self, kind: ViolationKind, topic: str, partition: int, start: int, end: int,
                   producer_id: int | None, detail: str, likely_cause: str | None = None) -> None:
        assert start < end, f"an empty range [{start}, {end}) for {kind.value}: {detail}"
        self.violations.append(Violation(kind, topic, partition, start, end, producer_id, detail, likely_cause))

    def _transaction(self, transaction: GroupTransaction, inputs: tuple[InputRange, ...]) -> AuditedTransaction:
        span = transaction.span
        decided = self._decided(offsets_log.TOPIC, self.offsets_partition, span)
        return self._audited(span, decided, inputs, self._outputs_of(decided))

    def _audited(self, span: TransactionSpan, decided: DecidedTransaction | None, inputs: tuple[InputRange, ...],
                 outputs: tuple[OutputBatch, ...]) -> AuditedTransaction:
        reason = decided.abort_reason if decided else None
        epoch = decided.producer_epoch if decided else span.first_epoch
        return AuditedTransaction(
            decided.transactional_id if decided else None, span.producer_id, epoch,
            span.marker.control_type.name if span.marker else "OPEN",
            span.marker.offset if span.marker and inputs else None, inputs, outputs,
            reason.cause.value if reason else None, reason.actor if reason else None)

    def _committed(self, links: dict[int, list[Link]]) -> list[tuple[AuditedTransaction, GroupTransaction]]:
        """The chain's transactions, each with its input ranges; the links checked."""
        ranges: dict[int, list[InputRange]] = {}
        for partition_links in links.values():
            for before, link in zip([None, *partition_links], partition_links):
                ranges.setdefault(id(link.transaction), []).append(
                    InputRange(link.partition, link.from_offset, link.to_offset))
                self._check_link(link, before)
        return [(self._transaction(transaction, tuple(sorted(ranges[id(transaction)], key=lambda r: r.partition))),
                 transaction)
                for transaction in sorted({id(l.transaction): l.transaction for ls in links.values() for l in ls}
                                          .values(), key=_marker_offset)]

    def _check_link(self, link: Link, before: Link | None) -> None:
        producer_id, t = link.transaction.span.producer_id, self.input_topic
        high_watermark = self.inputs[link.partition].high_watermark if link.partition in self.inputs else 0
        if link.to_offset < link.from_offset:
            other = before is not None and before.transaction.span.producer_id != producer_id
            self._violation(ViolationKind.DUPLICATE, t, link.partition, link.to_offset, link.from_offset, producer_id,
                            f"a committed transaction moved the committed offset back from {link.from_offset} to "
                            f"{link.to_offset}: offsets [{link.to_offset}, {link.from_offset}) are covered again",
                            ZOMBIE if other else None)
        elif link.to_offset > max(high_watermark, link.from_offset):
            self._violation(ViolationKind.GAP, t, link.partition, max(link.from_offset, high_watermark),
                            link.to_offset, producer_id,
                            f"a committed transaction committed offset {link.to_offset}, past the high watermark "
                            f"{high_watermark}: offsets that did not exist were skipped")

    def _check_counts(self, audited: AuditedTransaction, aborted: tuple[AuditedTransaction, ...]) -> None:
        """Without lineage: a transaction's output against its input, all its input partitions together."""
        ranges = [r for r in audited.inputs if r.to_offset > r.from_offset]
        if not ranges and audited.output_records:
            for partition, batches in _by_partition(audited.outputs).items():
                self._violation(ViolationKind.DUPLICATE, self.output_topic, partition, batches[0].base_offset,
                                batches[-1].last_offset + 1, audited.producer_id,
                                f"a committed transaction wrote {sum(b.record_count for b in batches)} output records "
                                f"here but advanced no input offset (its offsets were already committed): they "
                                f"duplicate earlier output", ZOMBIE)
            return
        if not ranges or not self.records_per_input:
            return
        records = sum(self.inputs[r.partition].visible.count(r.from_offset, r.to_offset) for r in ranges)
        expected = records * self.records_per_input
        if audited.output_records == expected:
            return
        skipped = sum(self.inputs[r.partition].aborted.count(r.from_offset, r.to_offset) for r in ranges)
        if audited.output_records > expected:
            kind = ViolationKind.DUPLICATE
            per_input, written = self.records_per_input, audited.output_records
            cause = (ISOLATION_LEVEL if skipped and written <= (records + skipped) * per_input
                     else NEXT_OFFSET if written == expected + len(ranges) * per_input else None)
        else:
            kind = ViolationKind.GAP
            cause = NO_REWIND if any(_overlaps(a.inputs, ranges) for a in aborted) else None
        where = ", ".join(f"{self.input_topic}-{r.partition} [{r.from_offset}, {r.to_offset})" for r in ranges)
        self._violation(kind, self.input_topic, ranges[0].partition, ranges[0].from_offset, ranges[0].to_offset,
                        audited.producer_id,
                        f"the transaction committed input {where} ({records} records"
                        f"{f', and {skipped} of aborted transactions' if skipped else ''}) but wrote "
                        f"{audited.output_records} output records, not {expected}", cause)

    def _committed_before(self, links: dict[int, list[Link]], partition: int, log_offset: int) -> int:
        """The group's committed offset of input ``partition`` just before ``__consumer_offsets``
        offset ``log_offset`` (a marker's, or a plain commit's): the last commit before it,
        transactional or plain; the log start offset before any."""
        commits = sorted([*((_marker_offset(l.transaction), l.to_offset) for l in links.get(partition, [])),
                          *((c.log_offset, c.offset) for c in self.commits.plain if c.partition == partition)])
        before = [offset for at, offset in commits if at < log_offset]
        return before[-1] if before else self.inputs[partition].log_start_offset if partition in self.inputs else 0

    def covered_to(self, links: dict[int, list[Link]], partition: int) -> int:
        """Where the group's commits end on ``partition``: the chain's end, or a plain
        commit past it (reported on its own)."""
        start = self.inputs[partition].log_start_offset
        chain_end = links[partition][-1].to_offset if links.get(partition) else start
        return max([chain_end, *(c.offset for c in self.commits.plain if c.partition == partition)])

    def _check_ends(self, links: dict[int, list[Link]]) -> None:
        """Input after the group's last commit, up to the audited end: not processed yet."""
        for partition, found in sorted(self.inputs.items()):
            start, end = self.covered_to(links, partition), self.ends[partition]
            waiting = found.visible.count(start, end)
            if waiting:
                unpaired = any(v.kind is ViolationKind.OUTPUT_WITHOUT_OFFSETS for v in self.violations)
                self._violation(ViolationKind.GAP, self.input_topic, partition, start, end, None,
                                f"not processed yet: {_records(waiting)} after the committed offset {start}"
                                f" (audited to {end})",
                                UNPAIRED if unpaired else NEXT_OFFSET if waiting == 1 and links.get(partition)
                                else None)

    def _aborted(self, links: dict[int, list[Link]]) -> tuple[AuditedTransaction, ...]:
        """Aborted transactions that wrote the group's offsets for T or output to U, once
        each; an aborted commit's input range starts at the offset committed before its marker."""
        seen: dict[int, AuditedTransaction] = {}
        for transaction in self.commits.transactions:
            span = transaction.span
            if span.marker is not None and span.marker.control_type is ControlType.ABORT:
                inputs = tuple(InputRange(p, self._committed_before(links, p, span.marker.offset), o)
                               for p, o in sorted(transaction.offsets().items()) if p in self.inputs)
                decided = self._decided(offsets_log.TOPIC, self.offsets_partition, span)
                seen[id(decided) if decided else id(span)] = self._transaction(transaction, inputs)
        for s, span, _ in self._output_spans(ControlType.ABORT):
            decided = self._decided(s.topic, s.partition, span)
            if decided is None or id(decided) not in seen:
                outputs = self._outputs_of(decided) or _output_batches(s.partition, span)
                seen[id(decided) if decided else id(span)] = self._audited(span, decided, (), outputs)
        return tuple(seen.values())

    def _check_plain_commits(self, links: dict[int, list[Link]]) -> None:
        """Each plain commit, with the input range it claims: from the offset committed
        before it (a commit of that very offset claims none: it is named by its place
        on ``__consumer_offsets``)."""
        for commit in self.commits.plain:
            before = self._committed_before(links, commit.partition, commit.log_offset)
            where = f"{offsets_log.TOPIC}-{self.offsets_partition} offset {commit.log_offset}"
            if before == commit.offset:
                self._violation(ViolationKind.OFFSETS_OUTSIDE_TRANSACTION, offsets_log.TOPIC, self.offsets_partition,
                                commit.log_offset, commit.log_offset + 1, None,
                                f"offset {commit.offset} of {self.input_topic}-{commit.partition} committed again "
                                f"outside any transaction (a plain OffsetCommit at {where}), after a transaction "
                                f"committed it", PLAIN_COMMIT)
            else:
                self._violation(ViolationKind.OFFSETS_OUTSIDE_TRANSACTION, self.input_topic, commit.partition,
                                min(before, commit.offset), max(before, commit.offset), None,
                                f"offset {commit.offset} committed outside any transaction (a plain OffsetCommit, "
                                f"at {where})", PLAIN_COMMIT)

    def with_offsets(self, committed: list[tuple[AuditedTransaction, GroupTransaction]]) -> set[int]:
        """The ids of the committed transactions that committed offsets of the group for T."""
        return {id(self._decided(offsets_log.TOPIC, self.offsets_partition, t.span)) for _, t in committed}

    def _check_outputs(self, committed: list[tuple[AuditedTransaction, GroupTransaction]]) -> None:
        for s in self.outputs:
            for batch in s.plain:
                self._violation(ViolationKind.OUTPUT_OUTSIDE_TRANSACTION, s.topic, s.partition,
                                batch.header.base_offset, batch.header.next_offset,
                                batch.header.producer_id if batch.header.has_producer_id else None,
                                f"{batch.header.record_count} output records written without a transaction")
        with_offsets = self.with_offsets(committed)
        for s, span, marker in self._output_spans(ControlType.COMMIT):
            decided = self._decided(s.topic, s.partition, span)
            if decided is None or id(decided) not in with_offsets:
                why = ("its transaction committed no offsets of the group for the input topic" if decided else
                       "no record of its transaction is left in the transaction log")
                self._violation(ViolationKind.OUTPUT_WITHOUT_OFFSETS, s.topic, s.partition, span.first_offset,
                                marker.offset, span.producer_id,
                                f"{span.record_count} committed output records: {why}", PLAIN_COMMIT)

    def _check_undecided(self) -> None:
        open_spans = [(s.topic, s.partition, span) for s in self.outputs for span in s.spans if span.marker is None]
        open_spans += [(offsets_log.TOPIC, self.offsets_partition, t.span) for t in self.commits.transactions
                       if t.span.marker is None]
        for topic, partition, span in open_spans:
            self._violation(ViolationKind.UNDECIDED_TRANSACTION, topic, partition, span.first_offset,
                            span.batches[-1].header.next_offset, span.producer_id,
                            "a transaction still open: its outcome is not decided yet")

    # -- lineage ------------------------------------------------------------------------------

    def _output_records(self, s: PartitionScan) -> Iterator[tuple[ControlType | None, DecidedTransaction | None,
                                                                  int, Record]]:
        """Each record of a sealed span or a plain batch of output partition ``s``: the
        span's outcome (None: plain), its decided transaction (None for a committed one
        only when the transaction log no longer names it), its producer id."""
        for span in s.spans:
            if span.marker is not None:
                decided = self._decided(s.topic, s.partition, span)
                for batch in span.batches:
                    for record in batch.records:
                        yield span.marker.control_type, decided, span.producer_id, record
        for batch in s.plain:
            for record in batch.records:
                yield None, None, batch.header.producer_id, record

    def _written(self) -> tuple[dict[tuple[int, int], list[_Written]], set[tuple[int, int]],
                                list[tuple[int, int, int]]] | None:
        """The output records that name an input record of T, by that record
        (partition, offset); the input records that aborted output named; and the
        committed output records naming none, as (partition, offset, producer id).
        None when no committed output record names an input record: no lineage."""
        written: dict[tuple[int, int], list[_Written]] = {}
        aborted: set[tuple[int, int]] = set()
        unnamed: list[tuple[int, int, int]] = []
        for s in self.outputs:
            for outcome, decided, producer_id, record in self._output_records(s):
                named = lineage.of(record.headers)
                if named is None:
                    if outcome is ControlType.COMMIT:
                        unnamed.append((s.partition, record.offset, producer_id))
                elif named.topic != self.input_topic:
                    continue
                elif outcome is ControlType.ABORT:
                    aborted.add((named.partition, named.offset))
                else:
                    written.setdefault((named.partition, named.offset), []).append(
                        _Written(decided, producer_id, s.partition, record.offset))
        if not written and not aborted:
            return None
        return written, aborted, unnamed


class _Lineage:
    """The lineage mode's checks: each input record against the committed output
    records naming it, and each such output record against an input record."""

    def __init__(self, audit: _Audit, links: dict[int, list[Link]],
                 committed: list[tuple[AuditedTransaction, GroupTransaction]], aborted: tuple[AuditedTransaction, ...],
                 written: dict[tuple[int, int], list[_Written]], aborted_outputs: set[tuple[int, int]],
                 unnamed: list[tuple[int, int, int]]) -> None:
        self.audit, self.links, self.written, self.unnamed = audit, links, written, unnamed
        self.aborted_outputs, self.aborted_attempts = aborted_outputs, aborted
        self.expected = audit.records_per_input or 1
        self.with_offsets = audit.with_offsets(committed)
        #: each committed transaction that committed offsets: what it committed, by its decided transaction's id
        self.committed_offsets = {id(audit._decided(offsets_log.TOPIC, audit.offsets_partition, t.span)): t.offsets()
                                  for _, t in committed}

    def check(self) -> None:
        for partition, found in sorted(self.audit.inputs.items()):
            self._check_inputs(partition, found)
        self._check_named()
        self._check_unnamed()

    def _covering(self, partition: int, found: _Input) -> dict[int, Link]:
        """For each input record of ``partition``, the first link of the chain whose
        range holds it: the transaction that committed its offset."""
        covering: dict[int, Link] = {}
        for link in self.links.get(partition, []):
            for offset in found.visible.within(link.from_offset, link.to_offset):
                covering.setdefault(offset, link)
        return covering

    def _check_inputs(self, partition: int, found: _Input) -> None:
        """Each input record up to the audited end, runs of the same finding reported as one range."""
        covered_to = self.audit.covered_to(self.links, partition)
        covering = self._covering(partition, found)
        run: list[int] = []
        finding: tuple | None = None
        for offset in found.visible.within(found.log_start_offset, self.audit.ends[partition]):
            current = self._finding(partition, offset, covered_to, covering.get(offset))
            if run and finding is not None and current != finding:
                self._report(partition, run, finding)
                run = []
            if current is not None:
                run.append(offset)
            finding = current
        if run and finding is not None:
            self._report(partition, run, finding)

    def _finding(self, partition: int, offset: int, covered_to: int, link: Link | None) -> tuple | None:
        """What is wrong with input record ``offset``, whose offset ``link`` committed
        (None: nothing), as a key equal for records whose finding reads the same."""
        writes = self.written.get((partition, offset), [])
        transactions = {id(w.transaction): w.transaction for w in writes if w.transaction is not None}
        committed = [w for w in writes if w.transaction is not None]
        if not transactions:
            if writes:
                return None  # its output is outside any transaction: OUTPUT_OUTSIDE_TRANSACTION says so
            if offset >= covered_to:
                return ViolationKind.GAP, "not processed yet", None
            return ViolationKind.GAP, "skipped", link.transaction.span.producer_id if link else None
        if len(transactions) > 1 or len(committed) > self.expected:
            producers = tuple(sorted({w.producer_id for w in committed}))
            return ViolationKind.DUPLICATE, len(committed), len(transactions), producers
        if len(committed) < self.expected:
            return ViolationKind.GAP, "partial", len(committed), committed[0].producer_id
        (transaction,) = transactions.values()
        link_decided = (self.audit._decided(offsets_log.TOPIC, self.audit.offsets_partition, link.transaction.span)
                        if link else None)
        if id(transaction) not in self.with_offsets or link_decided is transaction:
            return None  # no offsets at all: the span's OUTPUT_WITHOUT_OFFSETS says so
        own = self.committed_offsets.get(id(transaction), {}).get(partition)
        return (ViolationKind.OUTPUT_WITHOUT_OFFSETS, committed[0].producer_id, own,
                link.transaction.span.producer_id if link else None, own == offset)

    def _report(self, partition: int, run: list[int], finding: tuple) -> None:
        kind, start, end, topic = finding[0], run[0], run[-1] + 1, self.audit.input_topic
        records = _records(len(run))
        if kind is ViolationKind.GAP and finding[1] == "not processed yet":
            self.audit._violation(kind, topic, partition, start, end, None,
                                  f"not processed yet: {records} after the committed offset, no committed output "
                                  f"names them (audited to {self.audit.ends[partition]})",
                                  NEXT_OFFSET if len(run) == 1 and self.links.get(partition) else None)
        elif kind is ViolationKind.GAP and finding[1] == "skipped":
            rewind = any((partition, o) in self.aborted_outputs for o in run) or any(
                _overlaps(a.inputs, [InputRange(partition, start, end)]) for a in self.aborted_attempts)
            committer = "a committed transaction" if finding[2] is not None else "a commit outside any transaction"
            self.audit._violation(kind, topic, partition, start, end, finding[2],
                                  f"skipped: {committer} committed the offsets of {records} but no committed output "
                                  f"names them", NO_REWIND if rewind else None)
        elif kind is ViolationKind.GAP:
            self.audit._violation(kind, topic, partition, start, end, finding[3],
                                  f"{records}, each named by {finding[2]} committed output records, not "
                                  f"{self.expected}")
        elif kind is ViolationKind.DUPLICATE:
            _, outputs, transactions, producers = finding
            places = ", ".join(f"{self.audit.output_topic}-{w.partition}@{w.offset}"
                               for w in self.written[(partition, start)] if w.transaction is not None)
            self.audit._violation(kind, topic, partition, start, end, producers[-1],
                                  f"{records}, each named by {outputs} committed output records in {transactions} "
                                  f"transaction(s), not {self.expected} in one (offset {start}'s: {places})",
                                  ZOMBIE if len(producers) > 1 else None)
        else:
            _, producer_id, own, link_producer, at_own = finding
            wrote = (f"committed offset {own} of this partition, which does not cover them" if own is not None else
                     "committed no offset of this partition")
            committer = f"a transaction of producer {link_producer}" if link_producer is not None else "no transaction"
            self.audit._violation(kind, topic, partition, start, end, producer_id,
                                  f"{records}: the transaction that wrote their output {wrote}; {committer} "
                                  f"committed them: a crash between the two loses or repeats them",
                                  NEXT_OFFSET if at_own else None)

    def _check_named(self) -> None:
        """Committed output naming an input record a read_committed consumer never
        receives: aborted, a control record, or past the end (past ``until`` is not audited)."""
        wrong: dict[int, list[tuple[int, int, bool]]] = {}
        for (partition, offset), writes in self.written.items():
            found = self.audit.inputs.get(partition)
            committed = [w for w in writes if w.transaction is not None]
            if not committed or (found is not None and (offset < found.log_start_offset
                                                        or self.audit.ends[partition] <= offset < found.high_watermark
                                                        or offset in found.visible)):
                continue
            wrong.setdefault(partition, []).append((offset, committed[0].producer_id,
                                                    found is not None and offset in found.aborted))
        for partition, offsets in sorted(wrong.items()):
            for run in _runs(sorted(offsets), key=lambda o: o[2]):
                aborted = run[0][2]
                what = ("records of aborted transactions" if aborted else
                        "offsets that hold no record a read_committed consumer receives")
                self.audit._violation(ViolationKind.OUTPUT_WITHOUT_INPUT, self.audit.input_topic, partition,
                                      run[0][0], run[-1][0] + 1, run[0][1],
                                      f"committed output names {len(run)} input {what}",
                                      ISOLATION_LEVEL if aborted else None)

    def _check_unnamed(self) -> None:
        by_partition: dict[int, list[tuple[int, int, bool]]] = {}
        for partition, offset, producer_id in sorted(self.unnamed):
            by_partition.setdefault(partition, []).append((offset, producer_id, True))
        for partition, offsets in by_partition.items():
            for run in _runs(offsets, key=lambda o: o[1]):
                self.audit._violation(ViolationKind.OUTPUT_WITHOUT_INPUT, self.audit.output_topic, partition,
                                      run[0][0], run[-1][0] + 1, run[0][1],
                                      f"{len(run)} committed output records without the {lineage.HEADER} header, "
                                      f"while other output records have it")


def _marker_offset(transaction: GroupTransaction) -> int:
    """Where the COMMIT marker of a transaction the chain links is (it links committed ones only)."""
    marker = transaction.span.marker
    assert marker is not None, "the chain links committed transactions only"
    return marker.offset


def _records(count: int) -> str:
    return f"{count} input record{'s' if count != 1 else ''}"


def _runs(items: list[tuple[int, int, bool]], key: Callable[[tuple[int, int, bool]], object]
          ) -> Iterator[list[tuple[int, int, bool]]]:
    """``items`` (sorted by offset) in runs of consecutive offsets with the same ``key``."""
    run: list[tuple[int, int, bool]] = []
    for item in items:
        if run and (item[0] != run[-1][0] + 1 or key(item) != key(run[-1])):
            yield run
            run = []
        run.append(item)
    if run:
        yield run


def _overlaps(ranges: Iterable[InputRange], others: Iterable[InputRange]) -> bool:
    return any(r.partition == o.partition and max(r.from_offset, o.from_offset) < min(r.to_offset, o.to_offset)
               for r in ranges for o in others)


def _by_partition(batches: Iterable[OutputBatch]) -> dict[int, list[OutputBatch]]:
    found: dict[int, list[OutputBatch]] = {}
    for batch in batches:
        found.setdefault(batch.partition, []).append(batch)
    return found


def _output_batches(partition: int, span: TransactionSpan) -> tuple[OutputBatch, ...]:
    return tuple(OutputBatch(partition, b.header.base_offset, b.header.last_offset, b.header.record_count)
                 for b in span.batches)


