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
* every partition of U: its transactional spans and plain batches; and of T only the
  log start offset and high watermark (its records when ``records_per_input`` is
  given).

The verdict holds when none of these :class:`ViolationKind` is found:

* the committed transactions chain per input partition, in COMMIT-marker order, each
  advancing the committed offset ``[from, to)``; the chain starts at T's log start
  offset (Kafka's ``earliest``: an application starting from the log start must
  cover from there). A link that moves the committed offset back re-covers
  ``[to, from)``: DUPLICATE; one that does not advance yet wrote output wrote it for
  input already covered: DUPLICATE; one past T's high watermark skips offsets that
  do not exist yet: GAP. With ``records_per_input`` (the outputs a 1:1 transform
  writes per input record: 1), a transaction that wrote fewer records than its input
  ranges hold skipped input (GAP), more: DUPLICATE.
* an offset commit of the group for T outside any transaction (a plain OffsetCommit):
  OFFSETS_OUTSIDE_TRANSACTION;
* a data batch on U without the transactional bit: OUTPUT_OUTSIDE_TRANSACTION;
  output of an aborted transaction is fine -- its ABORT marker, and the ``.txnindex``
  entry it made, hide it from read_committed consumers (a read_uncommitted consumer
  sees it: the guarantee is read_committed's); output of a transaction still open
  is undecided: UNDECIDED_TRANSACTION (audit an application that has stopped);
* a committed span on U whose transaction committed no offsets of the group for T
  (or whose transaction the transaction log no longer names): OUTPUT_WITHOUT_OFFSETS.

Aborted attempts that touched the group's offsets or U are listed with the cause the
transaction log keeps for them (``AbortCause``). Compaction of the internal topics
removes history: only transactions still in their logs are audited exactly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from exactly.coordinator import offsets_chain, offsets_log, transaction_log
from exactly.coordinator.offsets_chain import DecidedTransaction, GroupCommits, GroupTransaction, Link
from exactly.storage.log_scan import LogView, PartitionScan, TransactionSpan, scan, view_of
from exactly.storage.record_batch import ControlType

if TYPE_CHECKING:
    from exactly.app.engine import Engine


class ViolationKind(enum.Enum):
    """What broke exactly-once; ``value`` is what the API, the CLI and the mirror show."""

    GAP = "GAP"
    """Input offsets no committed transaction covers."""
    DUPLICATE = "DUPLICATE"
    """Input offsets more than one committed transaction covers."""
    OFFSETS_OUTSIDE_TRANSACTION = "OFFSETS_OUTSIDE_TRANSACTION"
    """An offset commit outside any transaction (a plain OffsetCommit)."""
    OUTPUT_OUTSIDE_TRANSACTION = "OUTPUT_OUTSIDE_TRANSACTION"
    """Output records written without a transaction."""
    OUTPUT_WITHOUT_OFFSETS = "OUTPUT_WITHOUT_OFFSETS"
    """Committed output whose transaction committed no input offsets."""
    UNDECIDED_TRANSACTION = "UNDECIDED_TRANSACTION"
    """Output or offsets of a transaction still open."""


@dataclass(frozen=True, slots=True)
class Violation:
    kind: ViolationKind
    topic: str
    partition: int
    #: the offsets that broke it: ``[start_offset, end_offset)``
    start_offset: int
    end_offset: int
    producer_id: int | None
    detail: str


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
          records_per_input: int | None = None) -> AuditView:
    """The audit of ``group`` from ``input_topic`` to ``output_topic`` (on the caller's
    thread: the files are read here, never on the loop)."""
    views = engine.call(_take_views, engine, group, input_topic, output_topic)
    try:
        return _Audit(group, input_topic, output_topic, views, records_per_input).view()
    finally:
        for view in views.all():
            view.close()


class _Audit:
    """One audit's scans and what it found."""

    def __init__(self, group: str, input_topic: str, output_topic: str, views: _Views,
                 records_per_input: int | None) -> None:
        self.group, self.input_topic, self.output_topic = group, input_topic, output_topic
        self.records_per_input = records_per_input
        self.offsets_partition = views.offsets_partition
        offsets = scan(views.offsets, with_records=True) if views.offsets else None
        self.commits = offsets_chain.group_commits(offsets, group, input_topic) if offsets else GroupCommits((), ())
        self.inputs = {view.partition: scan(view, with_records=True) if records_per_input else view
                       for view in views.inputs}
        self.outputs = [scan(view) for view in views.outputs]
        self.decided = offsets_chain.decided_transactions(scan(view, with_records=True)
                                                          for view in views.transaction_log)
        self.matched = self._match(offsets)
        self.violations: list[Violation] = []

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

    def _outputs_of(self, decided: DecidedTransaction | None) -> tuple[OutputBatch, ...]:
        if decided is None:
            return ()
        return tuple(batch for s in self.outputs for span in s.spans
                     if self._decided(s.topic, s.partition, span) is decided
                     for batch in _output_batches(s.partition, span))

    # -- the verdict ----------------------------------------------------------------------

    def view(self) -> AuditView:
        starts = {p: v.log_start_offset for p, v in self.inputs.items()}
        links = offsets_chain.chain(self.commits, starts)
        committed = self._committed(links)
        aborted = self._aborted(links)
        self._check_plain_commits(links)
        self._check_outputs(committed)
        self._check_undecided()
        partitions = tuple(InputPartition(p, v.log_start_offset, v.high_watermark,
                                          links[p][-1].to_offset if links.get(p) else None)
                           for p, v in sorted(self.inputs.items()))
        return AuditView(self.group, self.input_topic, self.output_topic, not self.violations,
                         self.offsets_partition, partitions, tuple(t for t, _ in committed), aborted,
                         tuple(self.violations))

    def _violation(self, kind: ViolationKind, topic: str, partition: int, start: int, end: int,
                   producer_id: int | None, detail: str) -> None:
        self.violations.append(Violation(kind, topic, partition, start, end, producer_id, detail))

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
        """The chain's transactions, each checked: its links and its output count."""
        ranges: dict[int, list[InputRange]] = {}
        for partition_links in links.values():
            for link in partition_links:
                ranges.setdefault(id(link.transaction), []).append(
                    InputRange(link.partition, link.from_offset, link.to_offset))
                self._check_link(link)
        found = []
        for transaction in sorted({id(l.transaction): l.transaction for ls in links.values() for l in ls}.values(),
                                  key=_marker_offset):
            audited = self._transaction(transaction, tuple(sorted(ranges[id(transaction)],
                                                                  key=lambda r: r.partition)))
            self._check_counts(audited)
            found.append((audited, transaction))
        return found

    def _check_link(self, link: Link) -> None:
        producer_id, t = link.transaction.span.producer_id, self.input_topic
        high_watermark = self.inputs[link.partition].high_watermark if link.partition in self.inputs else 0
        if link.to_offset < link.from_offset:
            self._violation(ViolationKind.DUPLICATE, t, link.partition, link.to_offset, link.from_offset, producer_id,
                            f"a committed transaction moved the committed offset back from {link.from_offset} to "
                            f"{link.to_offset}: offsets [{link.to_offset}, {link.from_offset}) are covered again")
        elif link.to_offset > high_watermark:
            self._violation(ViolationKind.GAP, t, link.partition, max(link.from_offset, high_watermark),
                            link.to_offset, producer_id,
                            f"a committed transaction committed offset {link.to_offset}, past the high watermark "
                            f"{high_watermark}: offsets that did not exist were skipped")

    def _check_counts(self, audited: AuditedTransaction) -> None:
        advance = sum(r.to_offset - r.from_offset for r in audited.inputs)
        if advance <= 0 < audited.output_records:
            first = audited.inputs[0]
            self._violation(ViolationKind.DUPLICATE, self.input_topic, first.partition, first.to_offset,
                            max(first.from_offset, first.to_offset), audited.producer_id,
                            f"a committed transaction wrote {audited.output_records} output records but advanced no "
                            f"input offset (its offsets were already committed): they duplicate earlier output")
            return
        if not self.records_per_input:
            return
        for r in audited.inputs:
            self._check_ratio(audited, r, self.records_per_input)

    def _check_ratio(self, audited: AuditedTransaction, r: InputRange, records_per_input: int) -> None:
        """The records of one input range against its transaction's output."""
        if len(audited.inputs) != 1 or r.to_offset <= r.from_offset:
            return  # output is per transaction: a split across input partitions is unknowable
        input_scan = self.inputs[r.partition]
        assert isinstance(input_scan, PartitionScan), "the inputs are scanned when records_per_input is given"
        records = _visible_records(input_scan, r.from_offset, r.to_offset)
        expected = records * records_per_input
        if audited.output_records == expected:
            return
        kind = ViolationKind.GAP if audited.output_records < expected else ViolationKind.DUPLICATE
        self._violation(kind, self.input_topic, r.partition, r.from_offset, r.to_offset, audited.producer_id,
                        f"the transaction committed input [{r.from_offset}, {r.to_offset}) ({records} records) but "
                        f"wrote {audited.output_records} output records, not {expected}")

    def _aborted(self, links: dict[int, list[Link]]) -> tuple[AuditedTransaction, ...]:
        """Aborted transactions that wrote the group's offsets for T or output to U, once
        each; an aborted commit's input range starts at the offset committed before its marker."""
        seen: dict[int, AuditedTransaction] = {}
        for transaction in self.commits.transactions:
            span = transaction.span
            if span.marker is not None and span.marker.control_type is ControlType.ABORT:
                inputs = tuple(InputRange(p, _committed_before(links.get(p, []), span.marker.offset,
                                                               self.inputs[p].log_start_offset), o)
                               for p, o in sorted(transaction.offsets().items()) if p in self.inputs)
                decided = self._decided(offsets_log.TOPIC, self.offsets_partition, span)
                seen[id(decided) if decided else id(span)] = self._transaction(transaction, inputs)
        for s in self.outputs:
            for span in s.spans:
                if span.marker is None or span.marker.control_type is not ControlType.ABORT or not span.batches:
                    continue
                decided = self._decided(s.topic, s.partition, span)
                if decided is None or id(decided) not in seen:
                    outputs = self._outputs_of(decided) or _output_batches(s.partition, span)
                    seen[id(decided) if decided else id(span)] = self._audited(span, decided, (), outputs)
        return tuple(seen.values())

    def _check_plain_commits(self, links: dict[int, list[Link]]) -> None:
        """Each plain commit, with the input range it claims: from the offset committed before it."""
        for commit in self.commits.plain:
            start = self.inputs[commit.partition].log_start_offset if commit.partition in self.inputs else 0
            before = _committed_before(links.get(commit.partition, []), commit.log_offset, start)
            self._violation(ViolationKind.OFFSETS_OUTSIDE_TRANSACTION, self.input_topic, commit.partition,
                            min(before, commit.offset), max(before, commit.offset), None,
                            f"offset {commit.offset} committed outside any transaction (a plain OffsetCommit, "
                            f"at {offsets_log.TOPIC}-{self.offsets_partition} offset {commit.log_offset})")

    def _check_outputs(self, committed: list[tuple[AuditedTransaction, GroupTransaction]]) -> None:
        with_offsets = {id(self._decided(offsets_log.TOPIC, self.offsets_partition, t.span)) for _, t in committed}
        for s in self.outputs:
            for batch in s.plain:
                self._violation(ViolationKind.OUTPUT_OUTSIDE_TRANSACTION, s.topic, s.partition,
                                batch.header.base_offset, batch.header.next_offset,
                                batch.header.producer_id if batch.header.has_producer_id else None,
                                f"{batch.header.record_count} output records written without a transaction")
            for span in s.spans:
                if not span.batches or span.marker is None or span.marker.control_type is not ControlType.COMMIT:
                    continue
                decided = self._decided(s.topic, s.partition, span)
                if decided is None or id(decided) not in with_offsets:
                    why = ("its transaction committed no offsets of the group for the input topic" if decided else
                           "no record of its transaction is left in the transaction log")
                    self._violation(ViolationKind.OUTPUT_WITHOUT_OFFSETS, s.topic, s.partition, span.first_offset,
                                    span.marker.offset, span.producer_id,
                                    f"{span.record_count} committed output records: {why}")

    def _check_undecided(self) -> None:
        open_spans = [(s.topic, s.partition, span) for s in self.outputs for span in s.spans if span.marker is None]
        open_spans += [(offsets_log.TOPIC, self.offsets_partition, t.span) for t in self.commits.transactions
                       if t.span.marker is None]
        for topic, partition, span in open_spans:
            self._violation(ViolationKind.UNDECIDED_TRANSACTION, topic, partition, span.first_offset,
                            span.batches[-1].header.next_offset, span.producer_id,
                            "a transaction still open: its outcome is not decided yet")


def _visible_records(input_scan: PartitionScan, start: int, end: int) -> int:
    """The records in ``[start, end)`` a read_committed consumer receives: plain ones and committed ones."""
    batches = [*input_scan.plain, *(b for span in input_scan.spans if span.marker is not None
                                    and span.marker.control_type is ControlType.COMMIT for b in span.batches)]
    return sum(1 for b in batches for record in b.records if start <= record.offset < end)


def _marker_offset(transaction: GroupTransaction) -> int:
    """Where the COMMIT marker of a transaction the chain links is (it links committed ones only)."""
    marker = transaction.span.marker
    assert marker is not None, "the chain links committed transactions only"
    return marker.offset


def _output_batches(partition: int, span: TransactionSpan) -> tuple[OutputBatch, ...]:
    return tuple(OutputBatch(partition, b.header.base_offset, b.header.last_offset, b.header.record_count)
                 for b in span.batches)


def _committed_before(links: list[Link], marker_offset: int, log_start_offset: int) -> int:
    """The committed offset of a partition just before ``__consumer_offsets`` offset
    ``marker_offset`` (a marker's, or a plain commit's)."""
    before = [link.to_offset for link in links
              if link.transaction.span.marker and link.transaction.span.marker.offset < marker_offset]
    return before[-1] if before else log_start_offset
