"""The group coordinator: consumer groups, committed offsets and transactional offsets.

Requests and their answers (Kafka's ``GroupCoordinator``, classic protocol):

* JoinGroup -- empty group id: INVALID_GROUP_ID; session timeout outside
  ``group.min/max.session.timeout.ms``: INVALID_SESSION_TIMEOUT; a protocol type or
  protocols no member shares: INCONSISTENT_GROUP_PROTOCOL; an unknown member id:
  UNKNOWN_MEMBER_ID; a static member whose instance id another member took over:
  FENCED_INSTANCE_ID. A dynamic member without a member id, when the request asks
  for a known one (v4+, KIP-394), gets MEMBER_ID_REQUIRED and a member id that is
  *pending* until it joins with it (or its session timeout passes). A static member
  (KIP-345) without a member id whose instance id is known is that member
  restarted: the old member id is fenced, and in a Stable group whose protocol stays
  it gets the current generation and, at SyncGroup, its old assignment -- no
  rebalance. A known member rejoining with unchanged protocols while the generation
  syncs, or a follower doing so in a Stable group, gets the current generation at
  once. Otherwise the member waits until every member -- and every pending member --
  has joined (or the rebalance timeout drops the missing dynamic ones), then gets
  the new generation, the chosen protocol and the leader (the leader also gets
  every member's metadata).
* SyncGroup -- wrong generation: ILLEGAL_GENERATION; a rebalance started again:
  REBALANCE_IN_PROGRESS. The leader's assignment is made durable, then handed out;
  a failed write fails every waiting member and rebalances the group.
* Heartbeat -- unknown member: UNKNOWN_MEMBER_ID; wrong generation:
  ILLEGAL_GENERATION; a rebalance is on: REBALANCE_IN_PROGRESS (rejoin).
* LeaveGroup -- per member: by member id (the instance id, if given, must be its),
  or from v3 by instance id alone; a pending member id is forgotten. The group
  rebalances.
* OffsetCommit -- a standalone commit (generation -1, no member id) only while the
  group has no members; otherwise the member and generation must be current.
* TxnOffsetCommit -- first, as Kafka verifies it (KIP-890), the group's
  ``__consumer_offsets`` partition must be in the producer's Ongoing transaction
  (AddOffsetsToTxn put it there): otherwise INVALID_PRODUCER_ID_MAPPING,
  INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE, and nothing is written -- a stray
  commit would stay pending for ever, every ``require_stable`` fetch answering
  UNSTABLE_OFFSET_COMMIT. Like Kafka, the check is per partition: another group
  on the same partition is ended by the same marker. Then (KIP-447) when the
  request names a member or generation they must be current, so a zombie from an
  older generation is fenced
  (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID). The offsets are
  appended inside the producer's transaction and stay *pending* until its COMMIT
  marker lands on this ``__consumer_offsets`` partition (then committed) or its
  ABORT marker (then dropped).
* OffsetFetch -- with ``require_stable``, a partition with pending offsets answers
  UNSTABLE_OFFSET_COMMIT, and the consumer retries until the transaction ends.
* DeleteGroups -- an unknown group: GROUP_ID_NOT_FOUND; a group with members:
  NON_EMPTY_GROUP. Otherwise tombstones for its offsets and its metadata.
* OffsetDelete -- an unknown group: GROUP_ID_NOT_FOUND; a partition of a topic the
  members subscribe to: GROUP_SUBSCRIBED_TO_TOPIC. Otherwise tombstones.
* An offset reset (``kafka-consumer-groups --reset-offsets``) -- only while the group
  is Empty (NON_EMPTY_GROUP otherwise: its members would overwrite it), then an
  ordinary commit.
* A deleted topic -- its committed and pending offsets go, with tombstones, as Kafka
  removes them (``onPartitionsDeleted``).

Timers, as Kafka counts them (``tick`` runs them):

* Session -- restarted for every member when a join completes, when its SyncGroup
  is answered (or arrives in a Stable group), on Heartbeat and on OffsetCommit of
  the current generation; it does not run while a known member waits in JoinGroup
  or SyncGroup. A member past it -- a static one too -- is removed and the group
  rebalances. A new member's JoinGroup expires after ``NEW_MEMBER_JOIN_TIMEOUT_MS``;
  a pending member id after the session timeout its JoinGroup asked for.
* Join phase -- ends at the rebalance timeout (the members' longest), or, for an
  Empty group, after ``group.initial.rebalance.delay.ms``, repeated while new
  members keep joining, within the rebalance timeout. If only static members are
  missing and none rejoined, it waits another rebalance timeout.
* Sync phase -- members that got the new generation but send no SyncGroup within
  the rebalance timeout are removed and the group rebalances.

In a KIP-848 consumer group with members, JoinGroup, SyncGroup, Heartbeat and LeaveGroup
are a classic member's inside it (``consumer_group_coordinator.py``); a group migrates
between the two protocols as ``consumer_group_migration.py`` says.

Everything is persisted to ``__consumer_offsets`` before it is applied, and rebuilt
from it on start as the seed's Consumer Coordinator Startup says (transactional
offsets held back until their marker).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

from exactly.coordinator import consumer_group_migration, consumer_group_records, consumer_protocol, offsets_log
from exactly.coordinator.consumer_group import ConsumerGroup
from exactly.coordinator.consumer_group_coordinator import (
    ClassicJoin,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    ConsumerGroupIO,
    Heartbeat,
    HeartbeatAnswer,
)
from exactly.coordinator.group_metadata import (
    CommittedOffset,
    GroupMetadata,
    GroupState,
    InitialDelay,
    Member,
    TopicPartition,
)
from exactly.coordinator.schema import MAX_STRING_BYTES, SchemaError
from exactly.coordinator.transaction_log import partition_for
from exactly.storage.clock import Clock
from exactly.storage.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    KafkaError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
    UnsupportedVersionError,
)
from exactly.storage.record_batch import BatchHeader, ControlType, decode_batch, decode_control_record

log = logging.getLogger(__name__)
G = GroupState

#: Kafka's ``GroupCoordinator.NewMemberJoinTimeoutMs`` (not a config): how long a new
#: member's first JoinGroup may wait in a rebalance before it is dropped (UNKNOWN_MEMBER_ID;
#: a client still there joins again). Known members waiting to rejoin are never expired.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


class GroupIO(ConsumerGroupIO, Protocol):
    """What the group coordinator needs from the engine (on the engine's loop)."""

    async def append_offsets_log(self, partition: int, records: list[tuple[bytes, bytes | None]],
                                 producer_id: int = -1, producer_epoch: int = -1) -> None: ...

    def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partition: int) -> None:
        """Raise the Kafka error unless ``__consumer_offsets-<partition>`` is in the
        Ongoing transaction of this producer (the transaction coordinator's KIP-890 check)."""

    def subscribed_topics(self, protocol_type: str | None, metadata: bytes) -> set[str] | None:
        """The topics a member's metadata subscribes to, when its protocol type's layout is
        known (Kafka's "consumer" protocol); None for any other protocol."""


@dataclass(frozen=True)
class GroupConfig(ConsumerGroupConfig):
    """The group coordinator's configs: Kafka's names (dots as underscores) and
    defaults. Declared here only (and in ``ConsumerGroupConfig``, the ``group.consumer.*``
    ones); ``exactly/app/config.py``'s BrokerConfig includes them."""

    offsets_topic_num_partitions: int = 50
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    #: Kafka's default is 3000; its shipped server.properties (and we) use 0 for development
    group_initial_rebalance_delay_ms: int = 0
    offset_metadata_max_bytes: int = 4096


#: JoinGroup answers woken per turn of the loop when a rebalance completes (:func:`_answer_joins`)
JOIN_ANSWERS_PER_ROUND = 16


@dataclass(frozen=True)
class JoinResult:
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str
    member_id: str
    #: every member's (member id, group instance id, metadata) -- for the leader only
    members: list[tuple[str, str | None, bytes]]
    #: the leader is a restarted static member of a Stable group: it must not assign (v9)
    skip_assignment: bool = False


@dataclass(frozen=True)
class FetchedOffset:
    offset: int
    metadata: str
    leader_epoch: int
    error: KafkaError | None = None


class GroupCoordinator:
    """Every consumer group; runs on the engine's event loop."""

    def __init__(self, config: GroupConfig, io: GroupIO, clock: Clock) -> None:
        self.config = config
        self.io = io
        self.clock = clock
        self.groups: dict[str, GroupMetadata] = {}
        #: numbers offset records in the order they enter the log (replayed, then appended)
        self._append_order = itertools.count()
        #: the KIP-848 consumer group protocol (ConsumerGroupHeartbeat, its timers)
        self.consumer = ConsumerGroupCoordinator(config, io, clock, self.partition_of, self._downgrade)

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    # -- loading -------------------------------------------------------------------------

    def load_batch(self, partition: int, batch: bytes) -> None:
        """Replay one ``__consumer_offsets`` batch (start-up): data records update
        groups and offsets -- transactional ones held as pending -- and a marker
        completes its producer's pending offsets in this partition."""
        decoded = decode_batch(batch)
        header = decoded.header
        if header.is_control:
            control_type, _ = decode_control_record(decoded.records[0])
            if control_type in (ControlType.COMMIT, ControlType.ABORT):
                self.on_marker(partition, header.producer_id, control_type == ControlType.COMMIT)
            return
        for record in decoded.records:
            try:
                self._load_record(record.key, record.value, header)
            except SchemaError as e:
                log.warning("skipping undecodable __consumer_offsets record at %d: %s", record.offset, e)

    def _load_record(self, key: bytes | None, value: bytes | None, header: BatchHeader) -> None:
        if consumer_group_records.record_type(key) in consumer_group_records.TYPES:
            consumer_group_records.replay(_ConsumerGroups(self), key, value, self.io.topic_name)
            return
        decoded_key = offsets_log.decode_key(key)
        if isinstance(decoded_key, offsets_log.GroupKey):
            self._load_group(decoded_key.group, offsets_log.decode_group_value(value))
            return
        group = self._group(decoded_key.group)
        tp = (decoded_key.topic, decoded_key.partition)
        offset = offsets_log.decode_offset_value(value)
        appended_at = next(self._append_order)
        if offset is None:
            group.delete_offset(tp, appended_at)
            return
        committed = CommittedOffset(offset.offset, offset.metadata, offset.leader_epoch,
                                    offset.commit_timestamp)
        if header.is_transactional:
            group.add_pending(header.producer_id, tp, committed, appended_at)
        else:
            group.commit(tp, committed, appended_at)

    def _load_group(self, group_id: str, value: offsets_log.GroupValue | None) -> None:
        if value is None:
            # the classic group is gone (deleted, or it became a consumer group): its
            # offsets are not -- they have their own tombstones (Kafka keeps them apart)
            group = self.groups.get(group_id)
            if group is not None:
                self._reset_classic(group)
                if not group.committed and not group.pending and group.consumer is None:
                    del self.groups[group_id]
            return
        group = self._group(group_id)
        group.generation, group.protocol_type = value.generation, value.protocol_type
        group.protocol, group.leader = value.protocol, value.leader
        group.state_timestamp_ms = value.current_state_timestamp
        now = self.clock.now_ms()
        group.members = {m.member_id: Member(
            m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
            m.rebalance_timeout, value.protocol_type, [(value.protocol or "", m.subscription or b"")],
            session_deadline_ms=now + m.session_timeout, assignment=m.assignment or b"") for m in value.members}
        group.static_members = {m.group_instance_id: m.member_id for m in value.members if m.group_instance_id}
        group.state = G.STABLE if group.members else G.EMPTY

    def _group(self, group_id: str) -> GroupMetadata:
        group = self.groups.get(group_id)
        if group is None:
            _check_group_id(group_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        return group

    # -- transaction markers --------------------------------------------------------------

    def on_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` is durable on this partition."""
        for group in self.groups.values():
            if producer_id in group.pending and self.partition_of(group.group_id) == partition:
                group.complete_pending(producer_id, commit)

    # -- membership -----------------------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, protocol_type: str,
                         protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                         rebalance_timeout_ms: int = -1, group_instance_id: str | None = None,
                         client_id: str = "", client_host: str = "",
                         require_known_member_id: bool = False,
                         support_skipping_assignment: bool = False) -> JoinResult:
        """JoinGroup (Kafka's handleJoinGroup). ``require_known_member_id`` (JoinGroup v4+
        without an instance id, KIP-394): a member without a member id is given one with
        MEMBER_ID_REQUIRED and enters the group only when it joins again with it.
        ``support_skipping_assignment`` (v9): a restarted static leader may be told it
        leads, with ``skip_assignment``."""
        self._check_join(group_id, session_timeout_ms)
        timeouts = (session_timeout_ms, rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms)
        existing = self.groups.get(group_id)
        if existing is not None and existing.consumer is not None and existing.consumer.members:
            return await self._join_consumer_group(existing.consumer, ClassicJoin(
                member_id, group_instance_id, protocol_type, tuple(protocols), *timeouts, client_id, client_host,
                require_known_member_id))
        await self._leave_consumer_protocol(group_id)
        group = self._group_to_join(group_id, protocol_type, protocols)
        now = self.clock.now_ms()
        if member_id and not (group_instance_id is None and member_id in group.pending_members):
            member = self._validate_member(group, member_id, group_instance_id)
            if self._rejoins_unchanged(group, member, protocols):
                return self._join_result(group, member)
            return await self._update_member_and_rebalance(group, member, protocol_type, protocols, timeouts, now)
        if not member_id and group_instance_id is not None and group_instance_id in group.static_members:
            return await self._update_static_member_and_rebalance(
                group, group_instance_id, _new_member_id(client_id, group_instance_id),
                protocol_type, protocols, timeouts, now, support_skipping_assignment)
        if not member_id:
            member_id = _new_member_id(client_id, group_instance_id)
            if require_known_member_id and group_instance_id is None:
                # Kafka's doDynamicNewMemberJoinGroup: remembered for one session timeout
                group.pending_members[member_id] = now + session_timeout_ms
                raise MemberIdRequiredError(member_id, f"join group {group_id!r} again as {member_id}")
        member = self._add_member(group, member_id, group_instance_id, client_id, client_host, now)
        return await self._update_member_and_rebalance(group, member, protocol_type, protocols, timeouts, now,
                                                       new_member=True)

    def _check_join(self, group_id: str, session_timeout_ms: int) -> None:
        """A JoinGroup's group id and session timeout, checked before anything else."""
        if not group_id:
            raise InvalidGroupIdError("the group id must not be empty")
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            raise InvalidSessionTimeoutError(
                f"session timeout {session_timeout_ms} ms is outside [{self.config.group_min_session_timeout_ms}, "
                f"{self.config.group_max_session_timeout_ms}]")

    async def _join_consumer_group(self, consumer: ConsumerGroup, join: ClassicJoin) -> JoinResult:
        """A classic member joins a consumer group with members (Kafka's
        classicGroupJoinToConsumerGroup): the broker assigns, so it is answered at once,
        with no leader and no members' metadata."""
        answer = await self.consumer.classic_join(consumer, join)
        return JoinResult(answer.generation, consumer_protocol.PROTOCOL_TYPE, answer.protocol_name, "",
                          answer.member_id, [])

    def _group_to_join(self, group_id: str, protocol_type: str, protocols: list[tuple[str, bytes]]) -> GroupMetadata:
        """The group a JoinGroup may enter: a group not being deleted, protocols its members share."""
        group = self._group(group_id)
        if group.state is G.DEAD:
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being deleted")
        if not protocols or not group.supports(protocol_type, protocols):
            raise InconsistentGroupProtocolError(
                f"protocol type {protocol_type!r} / protocols {[n for n, _ in protocols]} do not match "
                f"group {group_id!r}")
        return group

    async def _leave_consumer_protocol(self, group_id: str) -> None:
        """A classic JoinGroup to an empty consumer group: it becomes classic again (its
        consumer records get tombstones, its offsets stay), as Kafka does."""
        group = self.groups.get(group_id)
        if group is None or group.consumer is None:
            return
        consumer = group.consumer
        await self.consumer.remove_all(consumer)
        if group.consumer is consumer and not consumer.members:
            group.consumer = None

    # -- the consumer group protocol (KIP-848) ---------------------------------------------

    async def consumer_group_heartbeat(self, request: Heartbeat) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat (``consumer_group_coordinator.py`` says what it answers).
        A join (epoch 0) creates the group, or takes over an empty classic group."""
        self.consumer.validate(request)
        group = self.groups.get(request.group_id)
        if group is None or group.state is G.DEAD:
            if request.member_epoch != 0:
                raise GroupIdNotFoundError(f"Group {request.group_id} not found.")
            group = self._group(request.group_id)
        if group.consumer is None:
            if group.members or group.state is not G.EMPTY:
                if request.member_epoch != 0 or not consumer_group_migration.may_upgrade(
                        self.consumer.migration_policy, group):
                    raise GroupIdNotFoundError(f"Group {request.group_id} is not a consumer group.")
                return await self._upgrade(group, request)
            if request.member_epoch != 0:
                raise GroupIdNotFoundError(f"Group {request.group_id} not found.")
            group.consumer = ConsumerGroup(request.group_id)
        return await self.consumer.heartbeat(group.consumer, request)

    async def _upgrade(self, group: GroupMetadata, request: Heartbeat) -> HeartbeatAnswer:
        """A member of the consumer protocol joins a classic group with members (Kafka's
        convertToConsumerGroup): the classic members waiting in JoinGroup or SyncGroup are
        told REBALANCE_IN_PROGRESS, the group becomes a consumer group of them in memory
        at once (so that their requests meanwhile are served by it), and the classic
        group's tombstone, the consumer group's records and the join's are made durable
        in one append. If that fails the group is classic again, as the log says."""
        consumer = consumer_group_migration.from_classic(group, self.io.topic_id)
        log.info("classic group %s becomes a consumer group: member %s joins it with the consumer protocol",
                 group.group_id, request.member_id)
        classic = dataclasses.replace(group, members=dict(group.members), static_members=dict(group.static_members))
        rejoin = RebalanceInProgressError(f"group {group.group_id!r} is becoming a consumer group; rejoin")
        for member in group.members.values():
            _fail(member.join_waiter, rejoin)
            _fail(member.sync_waiter, rejoin)
            member.join_waiter = member.sync_waiter = None
        self._reset_classic(group)
        group.consumer = consumer
        now = self.clock.now_ms()
        for member_id, joined in consumer.members.items():
            assert joined.classic is not None
            consumer.session_deadlines[member_id] = now + joined.classic.session_timeout_ms
        try:
            return await self.consumer.heartbeat(consumer, request, upgraded_from=[
                (offsets_log.encode_group_key(group.group_id), None)])
        except BaseException:
            if group.consumer is consumer and consumer.group_epoch == classic.generation:  # nothing was written
                consumer.detached = True
                group.consumer = None
                _take_classic(group, classic)
            raise

    @staticmethod
    def _reset_classic(group: GroupMetadata) -> None:
        """Forget the classic side of a group that changes type (its offsets stay)."""
        group.members, group.static_members, group.pending_members = {}, {}, {}
        group.pending_sync = set()
        group.initial_delay = None
        group.state = G.EMPTY
        group.protocol = group.leader = None

    async def _downgrade(self, consumer: ConsumerGroup, remaining: ConsumerGroup, rebalance: bool) -> None:
        """The consumer group's last member of the consumer protocol left (or its classic
        incarnation replaced it) and only classic members remain (Kafka's
        convertToClassicGroup): the consumer group's tombstones and the classic group's
        record are made durable in one append, then the group is classic -- Stable at its
        group epoch, each member with its target assignment -- and, when a member left, a
        rebalance starts, so that the members rejoin as a classic group."""
        now = self.clock.now_ms()
        classic = consumer_group_migration.to_classic(remaining, consumer.group_epoch, now)
        log.info("consumer group %s becomes a classic group: only members of the classic protocol remain",
                 consumer.group_id)
        await self.io.append_offsets_log(
            self.partition_of(consumer.group_id),
            consumer_group_records.records_between(consumer, None, self.io.topic_id)
            + [(offsets_log.encode_group_key(consumer.group_id),
                offsets_log.encode_group_value(_group_value(classic)))])
        group = self.groups[consumer.group_id]
        group.consumer = None
        _take_classic(group, classic)
        if rebalance:
            self._prepare_rebalance(group, now)

    def _validate_consumer_commit(self, consumer: ConsumerGroup, member_id: str, member_epoch: int,
                                  transactional: bool, api_version: int, group_instance_id: str | None = None) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit: a commit without a member epoch only
        while the group has no members, or a TxnOffsetCommit without group metadata (no
        member id, epoch -1: a producer given only the group id); otherwise a member's,
        at its current epoch (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION in a TxnOffsetCommit
        below v6, which Kafka's validateTransactionalOffsetCommit answers instead), and a
        non-transactional one over OffsetCommit v9+."""
        if member_epoch < 0 and not consumer.members:
            return
        if transactional and member_epoch == -1 and not member_id and group_instance_id is None:
            return
        member = consumer.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {consumer.group_id}.")
        if not transactional and member.classic is None and api_version < 9:
            raise UnsupportedVersionError("OffsetCommit version 9 or above must be used by members using "
                                          "the modern group protocol")
        if member_epoch != member.member_epoch:
            message = (f"The received member epoch {member_epoch} does not match the expected member "
                       f"epoch {member.member_epoch}.")
            # a classic member's generation is its member epoch: ILLEGAL_GENERATION, as Kafka answers
            raise (IllegalGenerationError(message) if transactional or member.classic is not None
                   else StaleMemberEpochError(message))

    def _validate_consumer_fetch(self, consumer: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9+ names the member)."""
        if member_id is None and member_epoch < 0:
            return
        member = consumer.members.get(member_id or "")
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {consumer.group_id}.")
        if member_epoch != member.member_epoch:
            raise StaleMemberEpochError(f"The received member epoch {member_epoch} does not match the "
                                        f"expected member epoch {member.member_epoch}.")

    async def _update_member_and_rebalance(self, group: GroupMetadata, member: Member, protocol_type: str,
                                           protocols: list[tuple[str, bytes]], timeouts: tuple[int, int],
                                           now: int, new_member: bool = False) -> JoinResult:
        """The member waits in the join phase (started unless one is on) until it completes."""
        self._update_member(group, member, protocol_type, protocols, timeouts)
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        if group.state is not G.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now)
        self._maybe_complete_join(group, now)
        try:
            return await waiter
        except asyncio.CancelledError:
            self._abandon_join(group, member, waiter, new_member)
            raise

    @staticmethod
    def _update_member(group: GroupMetadata, member: Member, protocol_type: str,
                       protocols: list[tuple[str, bytes]], timeouts: tuple[int, int]) -> None:
        """What a JoinGroup says of its member: protocols, session and rebalance timeouts."""
        member.session_timeout_ms, member.rebalance_timeout_ms = timeouts
        member.protocol_type, member.protocols = protocol_type, list(protocols)
        if group.protocol_type is None or len(group.members) == 1:
            group.protocol_type = protocol_type

    async def _update_static_member_and_rebalance(
            self, group: GroupMetadata, group_instance_id: str, new_member_id: str, protocol_type: str,
            protocols: list[tuple[str, bytes]], timeouts: tuple[int, int], now: int,
            support_skipping_assignment: bool) -> JoinResult:
        """Kafka's updateStaticMemberAndRebalance (KIP-345): a known instance joining
        without a member id is the same member restarted. The old incarnation is fenced
        (FENCED_INSTANCE_ID, its waiting requests too) and the member goes on under a new
        id. In a Stable group whose protocol stays the same it keeps its assignment -- no
        rebalance, the same generation; otherwise it joins the rebalance (one starts
        unless one is preparing: in CompletingRebalance the leader may be assigning to
        the old id)."""
        old_member_id = group.static_members[group_instance_id]
        old_leader = group.leader
        member = group.members[old_member_id]
        fenced = FencedInstanceIdError(f"instance {group_instance_id!r} rejoined as {new_member_id}")
        _fail(member.join_waiter, fenced)
        _fail(member.sync_waiter, fenced)
        member.join_waiter = member.sync_waiter = None
        group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        self._restart_session(member, now)
        if group.state is G.STABLE:
            before = (member.protocol_type, list(member.protocols), member.session_timeout_ms,
                      member.rebalance_timeout_ms)
            self._update_member(group, member, protocol_type, protocols, timeouts)
            if group.select_protocol() == group.protocol:
                return await self._keep_static_assignment(group, member, old_member_id, old_leader, before,
                                                          support_skipping_assignment)
        return await self._update_member_and_rebalance(group, member, protocol_type, protocols, timeouts, now)

    async def _keep_static_assignment(self, group: GroupMetadata, member: Member, old_member_id: str,
                                      old_leader: str | None, before: tuple[str, list[tuple[str, bytes]], int, int],
                                      support_skipping_assignment: bool) -> JoinResult:
        """The Stable group is stored with the static member's new id, then the member
        gets the current generation. Before JoinGroup v9 it is told the *old* leader id:
        a restarted leader does not see itself leader, so it assigns nothing and its
        SyncGroup gets its assignment back. From v9 a restarted leader is told it leads
        (it keeps watching metadata) and, with ``skip_assignment``, not to assign. A
        failed store puts the old id back."""
        new_member_id = member.member_id
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        try:
            await self._store_group(group)
        except BaseException as e:
            if member.join_waiter is waiter:
                member.join_waiter = None
            if isinstance(e, KafkaError) and group.members.get(new_member_id) is member:
                member.protocol_type, member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms = before
                group.replace_static_member(member.group_instance_id or "", new_member_id, old_member_id)
                self._restart_session(member, self.clock.now_ms())
            raise
        if member.join_waiter is waiter:  # no rebalance began meanwhile (it would answer the waiter)
            member.join_waiter = None
            waiter.set_result(
                dataclasses.replace(self._join_result(group, member), skip_assignment=group.leader == new_member_id)
                if support_skipping_assignment else
                JoinResult(group.generation, group.protocol_type, group.protocol, old_leader or "", new_member_id, []))
        return await waiter

    @staticmethod
    def _rejoins_unchanged(group: GroupMetadata, member: Member, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's doCurrentMemberJoinGroup: a member rejoining with the same protocols
        while the generation is being synced (it missed its JoinGroup answer), or a
        follower doing so in a Stable group, just gets the current generation -- no
        rebalance. A Stable group's leader rejoining does rebalance: that is how it asks
        for a new assignment."""
        if member.protocols != list(protocols):
            return False
        return (group.state is G.COMPLETING_REBALANCE
                or (group.state is G.STABLE and member.member_id != group.leader))

    @staticmethod
    def _join_result(group: GroupMetadata, member: Member) -> JoinResult:
        """The current generation as a JoinGroup answers it; the leader also gets every
        member's metadata."""
        everyone = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol or ""))
                    for m in group.members.values()] if member.member_id == group.leader else []
        return JoinResult(group.generation, group.protocol_type, group.protocol, group.leader or "",
                          member.member_id, everyone)

    def _abandon_join(self, group: GroupMetadata, member: Member, waiter: asyncio.Future[JoinResult],
                      new_member: bool) -> None:
        """The client gave up on its JoinGroup (it closed): it has not rejoined after
        all. A member this join created is removed at once, so the rebalance need not
        wait out the rebalance timeout for it; a known one is treated as not rejoined."""
        if member.join_waiter is not waiter:
            return  # the join completed (or was failed) already
        member.join_waiter = None
        if new_member:
            self._remove_member(group, member.member_id, UnknownMemberIdError("gave up joining"))
            self._after_removal(group, self.clock.now_ms())

    @staticmethod
    def _add_member(group: GroupMetadata, member_id: str, group_instance_id: str | None,
                    client_id: str, client_host: str, now: int) -> Member:
        """Kafka's addMemberAndRebalance, up to the rebalance: a new member (a pending
        one no longer), whose JoinGroup expires after ``NEW_MEMBER_JOIN_TIMEOUT_MS``."""
        member = Member(member_id, group_instance_id, client_id, client_host, 0, 0, "", [],
                        session_deadline_ms=now + NEW_MEMBER_JOIN_TIMEOUT_MS, is_new=True)
        if group.state is G.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True  # the initial delay may hold out longer for more
        group.pending_members.pop(member_id, None)
        group.members[member_id] = member
        if group_instance_id is not None:
            group.static_members[group_instance_id] = member_id
        return member

    @staticmethod
    def _validate_member(group: GroupMetadata, member_id: str, group_instance_id: str | None) -> Member:
        """Kafka's validateCurrentMember. The instance id is checked first: a static
        member replaced by a newer incarnation still names its instance id, and must
        learn that it is fenced (FENCED_INSTANCE_ID), not merely unknown."""
        if group_instance_id is not None:
            owner = group.static_members.get(group_instance_id)
            if owner is None:
                raise UnknownMemberIdError(
                    f"instance {group_instance_id!r} is not a member of group {group.group_id!r}")
            if owner != member_id:
                raise FencedInstanceIdError(
                    f"instance {group_instance_id!r} of group {group.group_id!r} belongs to member {owner!r}")
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
        return member

    def _prepare_rebalance(self, group: GroupMetadata, now: int) -> None:
        """Kafka's prepareRebalance: waiting syncs are told to rejoin, a pending sync
        deadline is dropped, and the join phase gets its deadline -- the rebalance
        timeout, or for a group that was Empty the first phase of the initial delay."""
        if group.state is G.COMPLETING_REBALANCE:
            self._answer_syncs(group, now, RebalanceInProgressError(f"group {group.group_id!r} is rebalancing"))
        group.pending_sync.clear()
        configured = self.config.group_initial_rebalance_delay_ms
        initial = group.state is G.EMPTY and configured > 0
        group.transition(G.PREPARING_REBALANCE, now)
        timeout = group.rebalance_timeout_ms()
        group.initial_delay = InitialDelay(configured, max(timeout - configured, 0)) if initial else None
        group.rebalance_deadline_ms = now + (configured if initial else timeout)

    def _maybe_complete_join(self, group: GroupMetadata, now: int) -> None:
        """Complete the join phase as soon as every member has rejoined (Kafka's
        tryCompleteJoin) -- except during the initial delay, which always runs out."""
        if (group.state is G.PREPARING_REBALANCE and group.initial_delay is None
                and group.has_all_members_joined()):
            self._complete_join(group, now)

    def _join_deadline_passed(self, group: GroupMetadata, now: int) -> None:
        """The join phase's deadline ran out. A phase of the initial delay during which
        a new member joined is followed by another (Kafka's InitialDelayedJoin), while
        the rebalance timeout lasts; otherwise the join completes without the rest."""
        delay = group.initial_delay
        if delay is not None and group.new_member_added and delay.remaining_ms > 0:
            group.new_member_added = False
            group.initial_delay = InitialDelay(min(self.config.group_initial_rebalance_delay_ms, delay.remaining_ms),
                                               max(delay.remaining_ms - delay.delay_ms, 0))
            group.rebalance_deadline_ms = now + group.initial_delay.delay_ms
            return
        self._complete_join(group, now)

    def _complete_join(self, group: GroupMetadata, now: int) -> None:
        """Kafka's onCompleteJoin: dynamic members that have not rejoined are removed
        (static ones stay until their session or the sync deadline removes them), the
        generation is bumped, every member's session restarts now -- however long it
        waited in JoinGroup -- and the members have the rebalance timeout to SyncGroup."""
        group.initial_delay = None
        for member_id in [m.member_id for m in group.members.values()
                          if m.join_waiter is None and m.group_instance_id is None]:
            self._remove_member(group, member_id, UnknownMemberIdError("did not rejoin in time"))
        joined = [m.member_id for m in group.members.values() if m.join_waiter is not None]
        if group.members and not joined:
            # only static members that have not rejoined: give them another rebalance timeout
            group.rebalance_deadline_ms = now + group.rebalance_timeout_ms()
            return
        group.generation += 1
        if not group.members:
            group.protocol = group.leader = None
            group.transition(G.EMPTY, now)
            asyncio.get_running_loop().create_task(self._store_group_quietly(group))
            return
        group.protocol = group.select_protocol()
        if group.leader not in joined:
            group.leader = joined[0]
        group.transition(G.COMPLETING_REBALANCE, now)
        answers: list[tuple[asyncio.Future[JoinResult], JoinResult]] = []
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            if waiter is not None and not waiter.done():
                answers.append((waiter, self._join_result(group, member)))
            self._restart_session(member, now)
            member.is_new = False
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now + group.rebalance_timeout_ms()
        _answer_joins(answers)

    @staticmethod
    def _restart_session(member: Member, now: int) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration."""
        member.session_deadline_ms = now + member.session_timeout_ms

    def _answer_syncs(self, group: GroupMetadata, now: int, error: KafkaError | None = None) -> None:
        """Answer every waiting SyncGroup -- its assignment, or ``error`` -- and restart the
        session of each member answered (Kafka's propagateAssignment)."""
        for member in group.members.values():
            waiter, member.sync_waiter = member.sync_waiter, None
            if waiter is None:
                continue
            if not waiter.done():
                if error is None:
                    waiter.set_result(member.assignment)
                else:
                    waiter.set_exception(error)
            self._restart_session(member, now)

    def _remove_member(self, group: GroupMetadata, member_id: str, error: KafkaError) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        group.pending_sync.discard(member_id)
        _fail(member.join_waiter, error)
        _fail(member.sync_waiter, error)
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member_id:
            del group.static_members[member.group_instance_id]
        if group.leader == member_id:
            group.leader = None

    async def sync_group(self, group_id: str, generation: int, member_id: str,
                         assignments: dict[str, bytes] | None = None, group_instance_id: str | None = None,
                         protocol_type: str | None = None, protocol_name: str | None = None) -> bytes:
        """SyncGroup. The protocol type and name (v5+, when given) must be the group's
        generation's: INCONSISTENT_GROUP_PROTOCOL otherwise, as Kafka checks them. In a
        consumer group, a classic member's SyncGroup (``consumer_group_coordinator.py``)."""
        consumer = self._consumer_group(group_id)
        if consumer is not None:
            return self.consumer.classic_sync(consumer, member_id, group_instance_id, generation,
                                              protocol_type, protocol_name)
        group, member = self._current_member(group_id, member_id, group_instance_id)
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {group_id!r}'s {group.generation}")
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol):
            raise InconsistentGroupProtocolError(
                f"protocol {protocol_type}/{protocol_name} is not group {group_id!r}'s "
                f"{group.protocol_type}/{group.protocol}")
        if group.state is G.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")
        group.pending_sync.discard(member_id)
        if group.state is G.STABLE:
            self._restart_session(member, self.clock.now_ms())
            return member.assignment
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = (assignments or {}).get(m.member_id, b"")
            try:
                await self._store_group(group)
            except KafkaError as e:
                # Kafka's resetAndPropagateAssignmentError: every member waiting on this
                # generation gets the error (instead of waiting for a session timeout),
                # the assignment that was not stored is not handed out later, and the
                # group rebalances (maybePrepareRebalance)
                if group.state is G.COMPLETING_REBALANCE and group.generation == generation:
                    for m in group.members.values():
                        m.assignment = b""
                    now = self.clock.now_ms()
                    self._answer_syncs(group, now, e)
                    self._prepare_rebalance(group, now)
                raise
            if group.state is G.COMPLETING_REBALANCE and group.generation == generation:
                now = self.clock.now_ms()
                group.transition(G.STABLE, now)
                self._answer_syncs(group, now)
        return await waiter

    async def heartbeat(self, group_id: str, generation: int, member_id: str,
                        group_instance_id: str | None = None) -> None:
        """Kafka's order: member, then generation -- a stale member's heartbeat restarts
        nothing -- then the session restarts and a rebalance in progress says rejoin. In a
        consumer group, a classic member's Heartbeat (``consumer_group_coordinator.py``)."""
        consumer = self._consumer_group(group_id)
        if consumer is not None:
            return self.consumer.classic_heartbeat(consumer, member_id, group_instance_id, generation)
        group, member = self._current_member(group_id, member_id, group_instance_id)
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {group_id!r}'s {group.generation}")
        self._restart_session(member, self.clock.now_ms())
        if group.state is G.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing; rejoin")

    async def leave_group(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> None:
        """LeaveGroup of one member (Kafka's handleLeaveGroup does each member so): without
        a member id (v3+: ``kafka-consumer-groups --delete ... --members``, an admin's
        removal) the instance id names the member; a member id still pending (handed out
        with MEMBER_ID_REQUIRED) is forgotten; otherwise the member must be current."""
        group = self.groups.get(group_id)
        if group is not None and group.state is G.DEAD:
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being deleted")
        if group is not None and group.consumer is not None:
            return await self.consumer.classic_leave(group.consumer, member_id, group_instance_id)
        now = self.clock.now_ms()
        if group is not None and member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(group, now)
            return
        if group is not None and not member_id and group_instance_id is not None:
            member_id = group.static_members.get(group_instance_id, "")
        group, _ = self._current_member(group_id, member_id, group_instance_id)
        self._remove_member(group, member_id, UnknownMemberIdError("left the group"))
        self._after_removal(group, now)

    def _after_removal(self, group: GroupMetadata, now: int) -> None:
        """A member left or was removed (Kafka's removeMemberAndUpdateGroup): a settled
        group rebalances, a rebalancing one may now have everyone it waits for."""
        if group.state in (G.STABLE, G.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        self._maybe_complete_join(group, now)

    def _consumer_group(self, group_id: str) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        return group.consumer if group is not None else None

    def _current_member(self, group_id: str, member_id: str,
                        group_instance_id: str | None) -> tuple[GroupMetadata, Member]:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
        return group, self._validate_member(group, member_id, group_instance_id)

    def tick(self) -> None:
        """Run the groups' timers (the engine calls this often): expired sessions, the
        join phase's deadline, the sync deadline."""
        now = self.clock.now_ms()
        self.consumer.tick(self._consumer_groups())
        for group in list(self.groups.values()):
            self._expire_pending_members(group, now)
            self._expire_sessions(group, now)
            if group.state is G.PREPARING_REBALANCE and now >= group.rebalance_deadline_ms:
                self._join_deadline_passed(group, now)
            elif group.pending_sync and now >= group.sync_deadline_ms:
                self._expire_pending_sync(group, now)

    def next_deadline_ms(self) -> int | None:
        """The earliest timer of any group -- a session, a join or sync phase, a pending
        member id -- so that the engine ticks when it is due, not up to a tick late."""
        deadlines = [d for d in (self.consumer.next_deadline_ms(self._consumer_groups()),) if d is not None]
        for group in self.groups.values():
            deadlines.extend(m.session_deadline_ms + 1 for m in group.members.values())
            deadlines.extend(d + 1 for d in group.pending_members.values())
            if group.state is G.PREPARING_REBALANCE:
                deadlines.append(group.rebalance_deadline_ms)
            elif group.pending_sync:
                deadlines.append(group.sync_deadline_ms)
        return min(deadlines, default=None)

    def _consumer_groups(self) -> list[ConsumerGroup]:
        return [g.consumer for g in self.groups.values() if g.consumer is not None]

    def _expire_sessions(self, group: GroupMetadata, now: int) -> None:
        expired = [m.member_id for m in group.members.values() if m.has_expired(now)]
        for member_id in expired:
            log.info("member %s of group %s timed out", member_id, group.group_id)
            self._remove_member(group, member_id, UnknownMemberIdError("session timed out"))
        if expired:
            self._after_removal(group, now)

    def _expire_pending_members(self, group: GroupMetadata, now: int) -> None:
        """Kafka's removePendingMemberAndUpdateGroup on expiry: a member id handed out with
        MEMBER_ID_REQUIRED that did not come back within the session timeout is forgotten
        -- a join phase waiting for it may complete."""
        expired = [member_id for member_id, deadline in group.pending_members.items() if now > deadline]
        for member_id in expired:
            del group.pending_members[member_id]
        if expired:
            self._maybe_complete_join(group, now)

    def _expire_pending_sync(self, group: GroupMetadata, now: int) -> None:
        """Kafka's onExpirePendingSync: members that got the new generation but sent no
        SyncGroup within the rebalance timeout are removed, and the group rebalances."""
        missing = sorted(group.pending_sync)
        log.info("members %s of group %s sent no SyncGroup in time", missing, group.group_id)
        for member_id in missing:
            self._remove_member(group, member_id, UnknownMemberIdError("sent no SyncGroup in time"))
        self._after_removal(group, now)

    # -- offsets --------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                             generation: int = -1, member_id: str = "",
                             group_instance_id: str | None = None,
                             api_version: int = 9) -> dict[TopicPartition, KafkaError | None]:
        """OffsetCommit; returns the error per partition (None for success). In a
        consumer group ``generation`` is the member epoch."""
        group = self.groups.get(group_id)
        if group is None and (generation >= 0 or member_id):
            raise IllegalGenerationError(f"group {group_id!r} has no generation {generation}")
        group = group or self._group(group_id)
        if group.consumer is not None:
            self._validate_consumer_commit(group.consumer, member_id, generation, False, api_version)
            return await self._append_offsets(group, offsets, producer_id=-1, producer_epoch=-1)
        member = self._validate_commit(group, generation, member_id, group_instance_id, transactional=False)
        if member is not None:  # a member of the current generation commits: it is alive (Kafka)
            self._restart_session(member, self.clock.now_ms())
        return await self._append_offsets(group, offsets, producer_id=-1, producer_epoch=-1)

    async def txn_commit_offsets(self, transactional_id: str, group_id: str, producer_id: int,
                                 producer_epoch: int, offsets: dict[TopicPartition, CommittedOffset],
                                 generation: int = -1, member_id: str = "",
                                 group_instance_id: str | None = None) -> dict[TopicPartition, KafkaError | None]:
        """TxnOffsetCommit: pending until the producer's transaction ends."""
        _check_group_id(group_id)
        self.io.verify_transaction(transactional_id, producer_id, producer_epoch, self.partition_of(group_id))
        group = self._group(group_id)
        if group.consumer is not None:
            self._validate_consumer_commit(group.consumer, member_id, generation, True, 9, group_instance_id)
        else:
            self._validate_commit(group, generation, member_id, group_instance_id, transactional=True)
        return await self._append_offsets(group, offsets, producer_id, producer_epoch)

    def _validate_commit(self, group: GroupMetadata, generation: int, member_id: str,
                         group_instance_id: str | None, transactional: bool) -> Member | None:
        """Kafka's validateOffsetCommit, KIP-447 included; the committing member, if one is named."""
        if group.state is G.DEAD:
            raise CoordinatorNotAvailableError(f"group {group.group_id!r} is being deleted")
        if generation >= 0 or member_id or group_instance_id is not None:
            member = self._validate_member(group, member_id, group_instance_id)
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation} is not group {group.group_id!r}'s {group.generation}")
            if not transactional and group.state is G.COMPLETING_REBALANCE:
                raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing")
            return member
        if not transactional and group.members:
            raise UnknownMemberIdError(
                f"group {group.group_id!r} has members; only they may commit offsets")
        return None

    async def _append_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, CommittedOffset],
                              producer_id: int, producer_epoch: int) -> dict[TopicPartition, KafkaError | None]:
        errors: dict[TopicPartition, KafkaError | None] = {}
        records = []
        for tp, committed in offsets.items():
            if len(committed.metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors[tp] = OffsetMetadataTooLargeError(
                    f"metadata of {tp[0]}-{tp[1]} exceeds offset.metadata.max.bytes")
                continue
            errors[tp] = None
            records.append((tp, committed))
        if records:
            # numbered before the append: nothing else reaches the log in between
            appended_at = next(self._append_order)
            await self.io.append_offsets_log(
                self.partition_of(group.group_id),
                [(offsets_log.encode_offset_key(group.group_id, tp[0], tp[1]),
                  offsets_log.encode_offset_value(offsets_log.OffsetValue(
                      c.offset, c.leader_epoch, c.metadata, c.commit_timestamp))) for tp, c in records],
                producer_id, producer_epoch)
            for tp, committed in records:
                if producer_id >= 0:
                    group.add_pending(producer_id, tp, committed, appended_at)
                else:
                    group.commit(tp, committed, appended_at)
        return errors

    async def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None,
                            require_stable: bool = False, member_id: str | None = None,
                            member_epoch: int = -1) -> dict[TopicPartition, FetchedOffset]:
        """OffsetFetch: committed offsets (-1 if none); UNSTABLE_OFFSET_COMMIT for a
        partition with pending transactional offsets when ``require_stable``. A member
        of a consumer group (v9+) must be at its current epoch."""
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            self._validate_consumer_fetch(group.consumer, member_id, member_epoch)
        if partitions is None:
            partitions = sorted(group.committed) if group else []
        result = {}
        for tp in partitions:
            committed = group.committed.get(tp) if group else None
            if require_stable and group is not None and group.has_pending(tp):
                # as Kafka: no offset at all with the error, so nobody starts from it
                result[tp] = FetchedOffset(-1, "", -1, UnstableOffsetCommitError(
                    f"{tp[0]}-{tp[1]} has pending transactional offsets"))
                continue
            result[tp] = FetchedOffset(committed.offset if committed else -1,
                                       committed.metadata if committed else "",
                                       committed.leader_epoch if committed else -1)
        return result

    # -- administration ------------------------------------------------------------------

    async def reset_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` for a group without members, as ``kafka-consumer-groups
        --reset-offsets --execute`` does (an admin's OffsetCommit at generation -1). A
        group with members is NON_EMPTY_GROUP: they would overwrite the reset with their
        next commit, so Kafka's tool refuses unless the group is inactive."""
        group = self.groups.get(group_id)
        if group is not None and group.state is not G.EMPTY:
            raise NonEmptyGroupError(f"group {group_id!r} is {group.state.value}; offsets can be reset "
                                     f"only while it is Empty (stop its consumers first)")
        now = self.clock.now_ms()
        errors = await self.commit_offsets(group_id, {tp: CommittedOffset(offset, "", -1, now)
                                                      for tp, offset in offsets.items()})
        for error in errors.values():
            if error is not None:
                raise error

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups: the group must exist (GROUP_ID_NOT_FOUND) and be Empty
        (NON_EMPTY_GROUP). It turns Dead at once -- joins and commits meanwhile answer
        COORDINATOR_NOT_AVAILABLE -- then tombstones for its committed offsets and its
        metadata are made durable, and only then is it forgotten. A failed write
        leaves it Dead in memory and present in the log: a retry deletes it, a restart
        brings it back as it was."""
        group = self.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"no group {group_id!r}")
        if group.consumer is not None and group.consumer.members:
            raise NonEmptyGroupError(f"consumer group {group_id!r} has {len(group.consumer.members)} member(s); "
                                     f"only an Empty group can be deleted")
        if group.state not in (G.EMPTY, G.DEAD):
            raise NonEmptyGroupError(f"group {group_id!r} is {group.state.value} with "
                                     f"{len(group.members)} member(s); only an Empty group can be deleted")
        group.transition(G.DEAD, self.clock.now_ms())
        if group.consumer is not None:
            await self.consumer.remove_all(group.consumer)
        records: list[tuple[bytes, bytes | None]] = [
            (offsets_log.encode_offset_key(group_id, topic, partition), None)
            for topic, partition in sorted(group.committed)]
        records.append((offsets_log.encode_group_key(group_id), None))
        await self.io.append_offsets_log(self.partition_of(group_id), records)
        if self.groups.get(group_id) is group:
            del self.groups[group_id]

    async def delete_offsets(self, group_id: str,
                             partitions: Iterable[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        """OffsetDelete (``kafka-consumer-groups --delete-offsets``): an unknown group is
        GROUP_ID_NOT_FOUND; an Empty group loses the offsets asked for; a group with
        members of the consumer protocol keeps those of topics its members subscribe to
        (GROUP_SUBSCRIBED_TO_TOPIC for each) and loses the others; a group with members
        of another protocol is NON_EMPTY_GROUP. Tombstones are durable before memory changes."""
        group = self.groups.get(group_id)
        if group is None or group.state is G.DEAD:
            raise GroupIdNotFoundError(f"no group {group_id!r}")
        subscribed: set[str] = set()
        if group.state is not G.EMPTY:
            for member in group.members.values():
                topics = self.io.subscribed_topics(group.protocol_type, member.metadata_for(group.protocol or ""))
                if topics is None:
                    raise NonEmptyGroupError(f"group {group_id!r} has members of protocol "
                                             f"{group.protocol_type!r}: its offsets cannot be deleted")
                subscribed |= topics
        errors: dict[TopicPartition, KafkaError | None] = {
            tp: GroupSubscribedToTopicError(f"group {group_id!r} consumes {tp[0]}") if tp[0] in subscribed else None
            for tp in partitions}
        gone = sorted(tp for tp, error in errors.items() if error is None and tp in group.committed)
        if gone:
            appended_at = next(self._append_order)
            await self.io.append_offsets_log(
                self.partition_of(group_id),
                [(offsets_log.encode_offset_key(group_id, t, p), None) for t, p in gone])
            for tp in gone:
                group.delete_offset(tp, appended_at)
        return errors

    async def delete_topic_offsets(self, topic: str) -> None:
        """The topic is deleted: every group's committed offsets on it get tombstones
        (durable first), and its pending transactional offsets on it are dropped -- a
        topic created again under the name starts without them, as in Kafka."""
        for group in list(self.groups.values()):
            pending = {tp for offsets in group.pending.values() for tp in offsets}
            gone = sorted(tp for tp in set(group.committed) | pending if tp[0] == topic)
            if not gone:
                continue
            # pending ones get a tombstone too: on replay it outranks them (appended later),
            # so their COMMIT marker cannot bring them back
            appended_at = next(self._append_order)
            await self.io.append_offsets_log(
                self.partition_of(group.group_id),
                [(offsets_log.encode_offset_key(group.group_id, t, p), None) for t, p in gone])
            for tp in gone:
                group.delete_offset(tp, appended_at)
            group.drop_pending(topic)

    # -- persistence ----------------------------------------------------------------------

    async def _store_group(self, group: GroupMetadata) -> None:
        await self.io.append_offsets_log(
            self.partition_of(group.group_id),
            [(offsets_log.encode_group_key(group.group_id), offsets_log.encode_group_value(_group_value(group)))])

    async def _store_group_quietly(self, group: GroupMetadata) -> None:
        try:
            await self._store_group(group)
        except KafkaError as e:
            log.warning("storing group %s failed: %s", group.group_id, e)

    def describe(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)


class _ConsumerGroups:
    """The coordinator's consumer groups as ``consumer_group_records.replay`` changes them."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def get(self, group_id: str) -> ConsumerGroup | None:
        group = self.coordinator.groups.get(group_id)
        return group.consumer if group is not None else None

    def __setitem__(self, group_id: str, consumer: ConsumerGroup) -> None:
        self.coordinator._group(group_id).consumer = consumer

    def __delitem__(self, group_id: str) -> None:
        self.coordinator.groups[group_id].consumer = None


def _group_value(group: GroupMetadata) -> offsets_log.GroupValue:
    """What ``__consumer_offsets`` keeps of a classic group (its GroupMetadata record)."""
    return offsets_log.GroupValue(
        group.protocol_type or "", group.generation, group.protocol, group.leader,
        group.state_timestamp_ms, tuple(offsets_log.MemberRecord(
            m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
            m.session_timeout_ms, m.metadata_for(group.protocol or ""), m.assignment)
            for m in group.members.values()))


def _take_classic(group: GroupMetadata, classic: GroupMetadata) -> None:
    """``group`` takes the classic side of ``classic`` (members, generation, protocol, state)."""
    for name in ("members", "static_members", "state", "generation", "protocol_type", "protocol", "leader",
                 "state_timestamp_ms"):
        setattr(group, name, getattr(classic, name))


def _fail(waiter: asyncio.Future[Any] | None, error: KafkaError) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(error)


def _new_member_id(client_id: str, group_instance_id: str | None) -> str:
    """Kafka's generateMemberId: the instance id (else the client id), a dash, a UUID."""
    return f"{group_instance_id or client_id or 'member'}-{uuid.uuid4()}"


def _check_group_id(group_id: str) -> None:
    """A group id a new group may have: not empty, and short enough to key ``__consumer_offsets``."""
    if not group_id or len(group_id.encode("utf-8")) > MAX_STRING_BYTES:
        raise InvalidGroupIdError(f"a group id must be 1 to {MAX_STRING_BYTES} bytes (a key of {offsets_log.TOPIC})")


def _answer_joins(answers: list[tuple[asyncio.Future[JoinResult], JoinResult]], start: int = 0) -> None:
    """Answer the JoinGroups of a completed round, :data:`JOIN_ANSWERS_PER_ROUND` per turn
    of the loop: each answer wakes its request, which then builds and encodes its
    response (the leader's holds every member's metadata: 2,000 members of 20 KB are a
    40 MB response), so waking 2,000 at once kept the loop from every other client for
    that long. The group's state changed already: only the answers wait their turn."""
    for waiter, result in answers[start:start + JOIN_ANSWERS_PER_ROUND]:
        if not waiter.done():  # its client may have gone meanwhile
            waiter.set_result(result)
    if start + JOIN_ANSWERS_PER_ROUND < len(answers):
        asyncio.get_running_loop().call_soon(_answer_joins, answers, start + JOIN_ANSWERS_PER_ROUND)
