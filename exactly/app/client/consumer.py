"""The embedded consumer: Kafka's consumer API, in-process.

::

    c = broker.consumer(group_id="g", isolation_level="read_committed", enable_auto_commit=False)
    c.subscribe(["in"])                     # group membership, range assignment
    # or c.assign([("in", 0)])              # manual assignment, no group membership
    for record in c.poll(timeout_ms=500):   # .topic .partition .offset .key .value .headers .timestamp
        ...
    c.commit()                              # or a producer's send_offsets_to_transaction(..., c.group_metadata())

It reads through the same record-level reader as everything else
(``exactly/storage/read_committed.py``): with ``read_committed`` it stops at the LSO, drops
aborted transactions and never returns control records, while its position moves
past them. Starting positions come from the group's committed offsets -- fetched
with ``require_stable`` under read_committed, so a consumer taking over a
partition waits out the previous owner's open transaction (KIP-447) -- or from
``auto_offset_reset``. A background thread heartbeats; a rebalance makes the next
``poll`` rejoin and take the new assignment. The rejoin (JoinGroup, then SyncGroup)
runs on the engine's loop and waits for every member, so it may outlast a poll:
``poll`` still returns within its timeout, and a later poll picks the assignment
up. Before rejoining, auto-commit commits the positions (Kafka's onJoinPrepare), so
the next owner of a partition starts where this one stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import TYPE_CHECKING, Iterable, Mapping

from exactly.app.client.types import ConsumerGroupMetadata, ConsumerRecord, IllegalStateError, OffsetAndMetadata
from exactly.coordinator import consumer_protocol
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.errors import (
    IllegalGenerationError,
    KafkaError,
    OffsetOutOfRangeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from exactly.storage.isolation_level import LABELS, IsolationLevel
from exactly.storage.read_committed import read_records

if TYPE_CHECKING:
    from exactly.app.engine import Engine

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
#: how long to wait before asking again for offsets a transaction still holds
UNSTABLE_RETRY_S = 0.05


class Consumer:
    """A consumer bound to an engine; like Kafka's, one thread at a time uses it."""

    def __init__(self, engine: "Engine", *, group_id: str | None = None,
                 isolation_level: str = "read_uncommitted", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, auto_offset_reset: str = "latest",
                 session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300_000, max_poll_records: int = 500,
                 max_partition_fetch_bytes: int = 1 << 20, group_instance_id: str | None = None,
                 client_id: str = "exactly-consumer") -> None:
        if isolation_level not in LABELS:
            raise ValueError(f"isolation_level must be read_committed or read_uncommitted, got {isolation_level!r}")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, got {auto_offset_reset!r}")
        self.engine = engine
        self.group_id = group_id
        self.read_committed = isolation_level == IsolationLevel.READ_COMMITTED.label
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.auto_offset_reset = auto_offset_reset
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_ms = max_poll_interval_ms
        self.max_poll_records = max_poll_records
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self._subscription: list[str] = []
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._member_id = ""
        self._generation = -1
        self._needs_join = False
        #: the JoinGroup + SyncGroup in flight on the engine's loop (its result: our assignment)
        self._rebalance: concurrent.futures.Future | None = None
        #: the member id the current positions were consumed under
        self._positions_member_id = ""
        self._last_auto_commit = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    # -- assignment ---------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the group and consume the partitions the group assigns."""
        if self.group_id is None:
            raise IllegalStateError("subscribe needs a group_id")
        self._abandon_rebalance()
        self._subscription = sorted(set(topics))
        self._assignment, self._positions = [], {}
        self._needs_join = True

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions, without group membership."""
        self._abandon_rebalance()
        self._subscription = []
        self._assignment = [_key(tp) for tp in partitions]
        self._positions = {tp: p for tp, p in self._positions.items() if tp in self._assignment}

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def unsubscribe(self) -> None:
        self._abandon_rebalance()
        self._leave()
        self._subscription, self._assignment, self._positions = [], [], {}

    # -- polling --------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records after the current positions; waits up to ``timeout_ms`` for some.

        Returns at once when there are records, or when a position moved past control
        records or an aborted transaction (as Kafka's poll does); otherwise an empty
        list once the timeout passed -- also while a rebalance is still going on."""
        self._check_open()
        deadline = time.monotonic() + timeout_ms / 1000
        limit = max_records or self.max_poll_records
        self._maybe_auto_commit()
        while True:
            if self._subscription and (self._needs_join or self._rebalance is not None):
                if not self._join(deadline):
                    return []  # the rebalance goes on; no records until the new assignment
            if self._initialize_positions(deadline):
                records, advanced = self._fetch(limit)
                if records or advanced:
                    return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            self.engine.call(self.engine.partitions.wait_for_data, min(remaining, 0.5))

    def _fetch(self, limit: int) -> tuple[list[ConsumerRecord], bool]:
        """Records from every assigned partition, and whether a position moved."""
        records: list[ConsumerRecord] = []
        before = dict(self._positions)
        for tp in self._assignment:
            while len(records) < limit and tp in self._positions:
                position = self._positions[tp]
                try:
                    result = self.engine.call(self.engine.partitions.fetch, tp[0], tp[1], position,
                                              self.max_partition_fetch_bytes,
                                              "read_committed" if self.read_committed else "read_uncommitted")
                except OffsetOutOfRangeError:
                    self._reset_position(tp)
                    continue
                if not result.records:
                    break
                got = read_records(result.records, position, self.read_committed,
                                   result.aborted_transactions or ())
                fresh = got.records[:limit - len(records)]
                records.extend(ConsumerRecord(tp[0], tp[1], r.offset, r.timestamp, r.timestamp_type,
                                              r.key, r.value, r.headers) for r in fresh)
                self._positions[tp] = fresh[-1].offset + 1 if len(fresh) < len(got.records) else got.next_offset
        return records, self._positions != before

    # -- positions --------------------------------------------------------------------------------

    def _initialize_positions(self, deadline: float) -> bool:
        """Give every assigned partition a position; False while a transaction still
        holds the committed offsets (read_committed, UNSTABLE_OFFSET_COMMIT)."""
        missing = [tp for tp in self._assignment if tp not in self._positions]
        if not missing:
            return True
        committed = {}
        if self.group_id is not None:
            fetched = self.engine.call(self.engine.groups.fetch_offsets, self.group_id, missing,
                                       self.read_committed)
            if any(isinstance(f.error, UnstableOffsetCommitError) for f in fetched.values()):
                if time.monotonic() + UNSTABLE_RETRY_S < deadline:
                    time.sleep(UNSTABLE_RETRY_S)  # the broker said: retry once the transaction ends
                return False
            committed = {tp: f.offset for tp, f in fetched.items() if f.offset >= 0}
        for tp in missing:
            if tp in committed:
                self._positions[tp] = committed[tp]
            else:
                self._reset_position(tp)
        return True

    def _reset_position(self, tp: TopicPartition) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(f"no committed offset for {tp[0]}-{tp[1]} and auto_offset_reset=none")
        timestamp = -2 if self.auto_offset_reset == "earliest" else -1
        isolation = "read_committed" if self.read_committed else "read_uncommitted"
        self._positions[tp] = self.engine.call(self.engine.partitions.list_offsets, tp[0], tp[1], timestamp, isolation).offset

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must not be negative, got {offset}")
        if _key(partition) not in self._assignment:
            raise IllegalStateError(f"{partition} is not assigned to this consumer")
        self._positions[_key(partition)] = offset

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """The end is the LSO under read_committed (the seed's Discussion on Seeks)."""
        self._seek_to(partitions, "latest")

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, where: str) -> None:
        saved, self.auto_offset_reset = self.auto_offset_reset, where
        try:
            for tp in partitions or self._assignment:
                self._reset_position(_key(tp))
        finally:
            self.auto_offset_reset = saved

    def position(self, partition: TopicPartition, timeout_ms: int = 60_000) -> int:
        """The offset of the next record to be returned; a partition without a position
        gets one first (under read_committed this waits while a transaction still holds
        the group's offsets: UNSTABLE_OFFSET_COMMIT if it does beyond ``timeout_ms``)."""
        tp = _key(partition)
        if tp not in self._assignment:
            raise IllegalStateError(f"{partition} is not assigned to this consumer")
        deadline = time.monotonic() + timeout_ms / 1000
        while tp not in self._positions:
            if not self._initialize_positions(deadline) and time.monotonic() >= deadline:
                raise UnstableOffsetCommitError(
                    f"{tp[0]}-{tp[1]}: the group's offsets are still pending in a transaction "
                    f"after {timeout_ms} ms")
        return self._positions[tp]

    # -- offsets ------------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """OffsetCommit of ``offsets`` (default: the current positions)."""
        if self.group_id is None:
            raise IllegalStateError("commit needs a group_id")
        chosen = offsets if offsets is not None else dict(self._positions)
        now = self.engine.clock.now_ms()
        committed = {_key(tp): CommittedOffset(o.offset, o.metadata, o.leader_epoch, now)
                     for tp, o in ((tp, v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v)))
                                   for tp, v in chosen.items())}
        if not committed:
            return
        errors = self.engine.call(self.engine.groups.commit_offsets, self.group_id, committed,
                                  self._generation if self._subscription else -1,
                                  self._member_id if self._subscription else "", self.group_instance_id)
        first = next((e for e in errors.values() if e is not None), None)
        if first is not None:
            raise first
        self._last_auto_commit = time.monotonic()

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self.group_id is None:
            raise IllegalStateError("committed needs a group_id")
        fetched = self.engine.call(self.engine.groups.fetch_offsets, self.group_id,
                                   [_key(tp) for tp in partitions], False)
        return {tp: (f.offset if f.offset >= 0 else None) for tp, f in fetched.items()}

    def _maybe_auto_commit(self, now: bool = False) -> None:
        """Auto-commit the positions when the interval passed (or ``now``); a failure
        is logged, as Kafka's auto-commit does."""
        if not self.enable_auto_commit or not self._positions:
            return
        if now or time.monotonic() - self._last_auto_commit >= self.auto_commit_interval_s:
            try:
                self.commit()
            except KafkaError as e:
                log.warning("auto-commit of group %s failed: %s", self.group_id, e)

    def group_metadata(self) -> ConsumerGroupMetadata:
        if self.group_id is None:
            raise IllegalStateError("group_metadata needs a group_id")
        return ConsumerGroupMetadata(self.group_id, self._generation, self._member_id, self.group_instance_id)

    # -- group membership -----------------------------------------------------------------------

    def _join(self, deadline: float) -> bool:
        """Drive the rebalance until ``deadline``; True once the new assignment is in
        place, False if the rebalance is still waiting (for other members to rejoin,
        or for the leader's assignment) -- it goes on, and the next call resumes it."""
        while True:
            if self._rebalance is None:
                if self._member_id:
                    self._maybe_auto_commit(now=True)  # Kafka's onJoinPrepare
                self._needs_join = True
                self._rebalance = self.engine.schedule(self._rejoin)
            rebalance = self._rebalance
            concurrent.futures.wait([rebalance], max(0.0, deadline - time.monotonic()))
            if not rebalance.done():
                return False
            self._rebalance = None
            try:
                assigned = rebalance.result()
            except UnknownMemberIdError:
                self._member_id, self._generation = "", -1
                continue
            except (RebalanceInProgressError, IllegalGenerationError):
                continue
            break
        partitions = consumer_protocol.decode_assignment(assigned)
        if self._member_id != self._positions_member_id:
            # we were out of the group for a while: another member may have consumed
            # our old partitions since, so start over from the committed offsets
            self._positions = {}
        self._positions = {tp: p for tp, p in self._positions.items() if tp in partitions}
        self._positions_member_id = self._member_id
        self._assignment = partitions
        self._needs_join = False
        self._start_heartbeats()
        return True

    async def _rejoin(self) -> bytes:
        """JoinGroup + SyncGroup on the engine's loop (as leader, compute the range
        assignment); returns this member's assignment."""
        gc, group_id = self.engine.groups, self.group_id
        assert group_id is not None, "only a subscribed consumer rejoins, and subscribe needs a group_id"
        subscription = consumer_protocol.encode_subscription(self._subscription)
        joined = await gc.join_group(
            group_id, self._member_id, consumer_protocol.PROTOCOL_TYPE,
            [(consumer_protocol.RANGE, subscription)], self.session_timeout_ms,
            self.max_poll_interval_ms, self.group_instance_id, self.client_id, "embedded")
        self._member_id, self._generation = joined.member_id, joined.generation
        assignments = await self._assign(joined) if joined.leader == joined.member_id else None
        # shielded: the leader's SyncGroup appends to __consumer_offsets, and an append is
        # never abandoned half-way (a cancel may only interrupt the wait for others)
        return await asyncio.shield(gc.sync_group(group_id, joined.generation, joined.member_id,
                                                  assignments, self.group_instance_id))

    async def _assign(self, joined) -> dict[str, bytes]:
        subscriptions = {member_id: consumer_protocol.decode_subscription(metadata)
                         for member_id, _, metadata in joined.members}
        topics = {t for ts in subscriptions.values() for t in ts}
        counts = self.engine.topics.partition_counts(sorted(topics))
        return {member: consumer_protocol.encode_assignment(tps)
                for member, tps in consumer_protocol.range_assign(subscriptions, counts).items()}

    def _abandon_rebalance(self) -> None:
        """Cancel a rejoin in flight (the coordinator forgets the waiting join)."""
        rebalance, self._rebalance = self._rebalance, None
        if rebalance is not None:
            rebalance.cancel()

    def _start_heartbeats(self) -> None:
        if self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                      name=f"heartbeat-{self.client_id}")
            self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.heartbeat_interval_s):
            member_id, generation = self._member_id, self._generation
            if not member_id or self._needs_join:
                continue
            try:
                self.engine.call(self.engine.groups.heartbeat, self.group_id, generation,
                                 member_id, self.group_instance_id, timeout=self.session_timeout_ms / 1000)
            except (UnknownMemberIdError, RebalanceInProgressError, IllegalGenerationError) as e:
                if (self._member_id, self._generation) != (member_id, generation):
                    continue  # about a generation poll has already rejoined past: not a new rebalance
                if isinstance(e, UnknownMemberIdError):
                    self._member_id = ""
                self._needs_join = True
            except (KafkaError, TimeoutError) as e:
                log.warning("heartbeat of group %s failed: %s", self.group_id, e)

    def _leave(self) -> None:
        """Leave the group -- a dynamic member only: a static member (KIP-345) keeps its
        place for ``session.timeout.ms``, so an instance restarting within it gets its
        partitions back without a rebalance (Kafka's consumer does the same)."""
        if self._member_id and self.group_id is not None and self.group_instance_id is None:
            try:
                self.engine.call(self.engine.groups.leave_group, self.group_id, self._member_id,
                                 self.group_instance_id)
            except KafkaError:
                pass  # the session timeout removes us anyway
        self._member_id, self._generation = "", -1

    def close(self) -> None:
        """Auto-commit the positions (a failure is logged), then leave the group (a
        dynamic member: a static one stays until its session times out)."""
        if self._closed.is_set():
            return
        try:
            self._maybe_auto_commit(now=True)
        finally:
            self._closed.set()
            self._abandon_rebalance()
            self._leave()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise IllegalStateError("the consumer is closed")


def _key(tp: TopicPartition) -> TopicPartition:
    """A partition as the plain ``(topic, partition)`` tuple the consumer keys its state
    by: a caller may hand a list, or a client library's named tuple."""
    topic, partition = tp
    return topic, partition
