"""What the coordinators' logs say about one group's transactions, for the
exactly-once audit (``exactly/app/engine/audit.py``).

* :func:`group_commits`: from a scan of the group's ``__consumer_offsets`` partition
  (``exactly.storage.log_scan``), the group's offset commits for one input topic -- those
  inside a producer's transaction (a span sealed by its COMMIT or ABORT marker, or
  still open) and those written outside any (a plain OffsetCommit).
* :func:`chain`: the committed ones, in the order of their COMMIT markers (the order
  in which they became the group's committed offset), as links ``[from, to)`` per
  input partition: ``from`` is the committed offset before the link -- the input
  partition's log start offset before the first one (Kafka's ``earliest``: an
  application that starts from the log start must cover from there).
* :func:`decided_transactions`: from scans of ``__transaction_state``, every
  transaction whose outcome the coordinator decided (a PrepareCommit or PrepareAbort
  record), in log order per producer id, with its partitions and, for an abort, why.
  A producer id belongs to one transactional id and its transactions run one after
  the other (the next cannot begin before every marker of the previous one is
  written), so the n-th decided transaction of a producer id naming a partition is
  the n-th sealed span of that producer id on the partition, whatever epochs the
  data and the marker carry (a fence bumps the marker's). Compaction removes old
  Prepare records: matching from the newest keeps the recent ones exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.schema import SchemaError
from exactly.coordinator.transaction_state import AbortReason, TxnTransitMetadata
from exactly.storage.log_scan import PartitionScan, ScannedBatch, TransactionSpan
from exactly.storage.record_batch import ControlType


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One offset commit record of the group for the input topic."""

    log_offset: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class GroupTransaction:
    """A producer's transaction on the group's offsets partition that committed
    offsets of the input topic: its span and what it committed (the last record per
    input partition wins, as the group coordinator applies them)."""

    span: TransactionSpan
    commits: tuple[OffsetCommit, ...]

    def offsets(self) -> dict[int, int]:
        return {commit.partition: commit.offset for commit in self.commits}


@dataclass(frozen=True, slots=True)
class GroupCommits:
    transactions: tuple[GroupTransaction, ...]
    #: commits written outside any transaction (a plain OffsetCommit)
    plain: tuple[OffsetCommit, ...]


def _commits(batches: Iterable[ScannedBatch], group: str, topic: str) -> tuple[OffsetCommit, ...]:
    found = []
    for batch in batches:
        for record in batch.records:
            try:
                key = offsets_log.decode_key(record.key)
                if not (isinstance(key, offsets_log.OffsetKey) and key.group == group and key.topic == topic):
                    continue
                value = offsets_log.decode_offset_value(record.value)
            except SchemaError:
                continue  # another kind of record, or one we cannot read: not the group's commit
            if value is not None:
                found.append(OffsetCommit(record.offset, key.partition, value.offset))
    return tuple(found)


def group_commits(offsets: PartitionScan, group: str, topic: str) -> GroupCommits:
    """The group's commits for ``topic`` in its ``__consumer_offsets`` partition (scanned with records)."""
    transactions = tuple(GroupTransaction(span, commits) for span in offsets.spans
                         if (commits := _commits(span.batches, group, topic)))
    return GroupCommits(transactions, _commits(offsets.plain, group, topic))


@dataclass(frozen=True, slots=True)
class Link:
    """One committed transaction's input range ``[from_offset, to_offset)`` on one partition."""

    partition: int
    from_offset: int
    to_offset: int
    transaction: GroupTransaction


def chain(commits: GroupCommits, log_start_offsets: dict[int, int]) -> dict[int, list[Link]]:
    """The committed transactions' links per input partition, in COMMIT-marker order."""
    committed = sorted(((marker.offset, t) for t in commits.transactions
                        if (marker := t.span.marker) is not None and marker.control_type is ControlType.COMMIT),
                       key=lambda by_marker: by_marker[0])
    links: dict[int, list[Link]] = {}
    for _, transaction in committed:
        for partition, offset in sorted(transaction.offsets().items()):
            previous = links.get(partition)
            start = previous[-1].to_offset if previous else log_start_offsets.get(partition, 0)
            links.setdefault(partition, []).append(Link(partition, start, offset, transaction))
    return links


@dataclass(frozen=True, slots=True)
class DecidedTransaction:
    """A PrepareCommit/PrepareAbort record: one transaction and its outcome."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    outcome: ControlType
    partitions: frozenset[tuple[str, int]]
    abort_reason: AbortReason | None
    start_ms: int
    #: its CompleteCommit/CompleteAbort record follows: every marker is written
    complete: bool = False


def _transits(scan: PartitionScan) -> Iterable[tuple[str, TxnTransitMetadata]]:
    for batch in scan.plain:
        for record in batch.records:
            try:
                decoded = transaction_log.decode(record.key, record.value, record.headers)
            except SchemaError:
                continue
            if decoded.transit is not None:
                yield decoded.transactional_id, decoded.transit


def decided_transactions(scans: Iterable[PartitionScan]) -> dict[int, list[DecidedTransaction]]:
    """Per producer id, its decided transactions in log order (scans with records)."""
    found: dict[int, list[DecidedTransaction]] = {}
    for scan in scans:
        prepared: list[tuple[str, TxnTransitMetadata, ControlType]] = []
        completed: set[int] = set()  # indexes into prepared
        latest: dict[str, int] = {}
        for txn_id, transit in _transits(scan):
            if transit.state.is_complete and txn_id in latest:
                completed.add(latest.pop(txn_id))
            elif transit.state.is_prepared and (outcome := transit.state.outcome) is not None:
                latest[txn_id] = len(prepared)
                prepared.append((txn_id, transit, outcome))
        for n, (txn_id, transit, outcome) in enumerate(prepared):
            found.setdefault(transit.producer_id, []).append(DecidedTransaction(
                txn_id, transit.producer_id, transit.producer_epoch, outcome,
                transit.partitions, transit.abort_reason, transit.txn_start_timestamp, n in completed))
    return found


def match_spans(decided: list[DecidedTransaction], spans: dict[tuple[str, int], list[TransactionSpan]]
                ) -> dict[tuple[int, str, int, int], DecidedTransaction]:
    """Which decided transaction sealed each span of one producer id: ``(producer id,
    topic, partition, marker offset) -> transaction``, matched from the newest so a
    compacted-away beginning of the history leaves only the oldest spans unmatched.
    ``spans`` holds the producer's spans per scanned partition in order (the last may
    be open). A transaction still writing its markers (no Complete record yet) has
    sealed only the partitions whose last span is no longer open."""
    left = {tp: [(span, marker) for span in found if (marker := span.marker) is not None]
            for tp, found in spans.items()}
    still_open = {tp for tp, found in spans.items() if found and found[-1].marker is None}
    matched = {}
    for transaction in reversed(decided):
        for tp in transaction.partitions:
            if left.get(tp) and (transaction.complete or tp not in still_open):
                span, marker = left[tp].pop()
                matched[(span.producer_id, tp[0], tp[1], marker.offset)] = transaction
    return matched
