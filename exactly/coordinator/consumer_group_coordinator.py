"""ConsumerGroupHeartbeat and the timers of KIP-848 consumer groups.

Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``, answered as Kafka answers it:

* An invalid request is INVALID_REQUEST: an empty group id; from v1 an empty member
  id (the client makes its own); a join (epoch 0) without a rebalance timeout,
  without a subscription (topic names or a regex) or with owned partitions; epoch
  -2 (a static member leaving for a moment) without an instance id. An assignor
  not in ``group.consumer.assignors``: UNSUPPORTED_ASSIGNOR; a regex that does
  not compile: INVALID_REGULAR_EXPRESSION.
* A group that does not exist, asked with an epoch other than 0, or a classic
  group with members that ``group.consumer.migration.policy`` does not let upgrade
  (``consumer_group_migration.py``): GROUP_ID_NOT_FOUND. An *empty* classic group --
  offsets only -- becomes a consumer group, its offsets kept.
* An unknown member: UNKNOWN_MEMBER_ID; an instance id that another member id
  now holds: FENCED_INSTANCE_ID; an epoch ahead of the member's, or behind it
  other than by the previous epoch of a member that owns no more than its
  assignment (its last answer was lost): FENCED_MEMBER_EPOCH -- the member
  rejoins with epoch 0. A static member joining while another member id holds
  its instance id, unless that one left with epoch -2: UNRELEASED_INSTANCE_ID.
* Epoch -1 leaves (the group epoch moves, its partitions are free); -2 keeps
  a static member's assignment for its session timeout, for a new member id
  with the same instance id to take over at once, without a rebalance.

Otherwise the member's subscription is updated; a new member, a changed
subscription or a change of the subscribed topics (a topic created that a regex
matches, partitions added, a topic deleted) bumps the group epoch; the target
assignment is recomputed when behind it; the member is reconciled
(``consumer_group.reconcile``); the records of the change are made durable; and
the answer carries the member epoch, the heartbeat interval and -- when it
changed, on a join, or on a full request -- the member's assignment.

Timers (``tick``): a member that sends no heartbeat for ``group.consumer.session.timeout.ms``
is fenced (removed, the group epoch moves); one that must revoke partitions and
has not within its rebalance timeout is fenced too.

Members of the classic protocol inside a consumer group (an online migration lets
them in: Kafka's classicGroupJoinToConsumerGroup, ...SyncToConsumerGroup,
...HeartbeatToConsumerGroup, ...LeaveToConsumerGroup) are members like the others,
their JoinGroup metadata persisted with them:

* JoinGroup -- protocols no classic member shares, or a protocol type other than
  ``consumer``: INCONSISTENT_GROUP_PROTOCOL; v4+ without a member id: MEMBER_ID_REQUIRED
  with one. The subscription in the metadata is the member's subscription, the
  partitions it says it owns (v1+) what it still owns; the member is reconciled as a
  heartbeat would and answered with its member epoch as the generation, the ``consumer``
  protocol type, its first protocol's name and no leader (nobody assigns: the broker
  did). A static member joining without a member id replaces its instance's member.
  It must SyncGroup within its rebalance timeout, or is fenced.
* SyncGroup -- unknown member: UNKNOWN_MEMBER_ID (so is a member of the consumer
  protocol); a generation other than its epoch: ILLEGAL_GENERATION; another protocol:
  INCONSISTENT_GROUP_PROTOCOL; a group epoch ahead of its epoch (unless it is revoking):
  REBALANCE_IN_PROGRESS. Otherwise its current assignment, in the consumer protocol's
  ``ConsumerProtocolAssignment`` of its subscription's version.
* Heartbeat -- the same checks, then the session restarts, and REBALANCE_IN_PROGRESS
  tells it to rejoin when the group epoch moved past it, it must revoke partitions, or
  partitions it waits for were released; it is fenced unless it rejoins within its
  rebalance timeout.
* LeaveGroup -- the member (by member id, or instance id) is removed.

Its session timeout is the one its JoinGroup asked for. When a member leaves or is
fenced and only classic members remain, the group may become classic again
(``consumer_group_migration.py``).

Regular expressions are RE2/J's in Kafka and Python's ``re`` here, matched whole
(``fullmatch``, as RE2/J's ``matches``) against every non-internal topic. For the
patterns clients use (literals, ``.``, ``*``, ``+``, ``?``, classes, groups,
alternation, ``\\d``/``\\w``) they agree; Python accepts back-references and
look-arounds that RE2/J refuses, and RE2/J's ``\\pN``-style classes without
braces are not Python's. A regex matches only the topics the principal of the
heartbeat that resolves it may Describe (Kafka's TopicRegexResolver). Unlike Kafka,
which resolves in the background (at most every 10 s), the topics are resolved on the
heartbeat that finds a regex new, the set of topics changed, or
``group.consumer.regex.refresh.interval.ms`` passed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass, replace
from typing import Awaitable, Callable, Protocol

from exactly.coordinator import consumer_group_records as records
from exactly.coordinator import consumer_protocol
from exactly.coordinator.assignors import ASSIGNORS
from exactly.coordinator.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    NO_PARTITIONS,
    STATIC_LEAVE_EPOCH,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    Partitions,
    reconcile,
)
from exactly.coordinator.consumer_group_migration import MigrationPolicy, may_downgrade, subscription_version
from exactly.coordinator.schema import SchemaError
from exactly.storage import topic_id
from exactly.storage.clock import Clock
from exactly.storage.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    KafkaError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

log = logging.getLogger(__name__)


class ConsumerGroupIO(Protocol):
    """What the consumer group protocol needs of the engine (on its loop)."""

    async def append_offsets_log(self, partition: int, records: list[tuple[bytes, bytes | None]],
                                 producer_id: int = -1, producer_epoch: int = -1) -> None: ...

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id, None if it does not exist."""

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, None if none has it."""

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Partitions per existing topic (unknown ones left out)."""

    def topic_names(self) -> list[str]:
        """Every topic that is not internal (what a regex subscription can match)."""


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The ``group.consumer.*`` configs: Kafka's names (dots as underscores) and defaults."""

    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    #: the server-side assignors, the first the default (Kafka: ``uniform,range``)
    group_consumer_assignors: str = "uniform,range"
    #: how long a regex subscription's topics are kept before they are matched again
    #: (they are sooner when a regex or the set of topics changes)
    group_consumer_regex_refresh_interval_ms: int = 600_000
    #: which way a group with members may change type: ``bidirectional``, ``upgrade``
    #: (classic -> consumer), ``downgrade`` (consumer -> classic) or ``disabled``
    group_consumer_migration_policy: str = "bidirectional"


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields; None means "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    #: v1+: the client makes its member id
    member_id_required: bool = True
    #: the topics the member's principal may Describe (None: every topic): what the
    #: group's regexes match when this heartbeat resolves them, as Kafka filters them
    describable: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: None: unchanged, not sent
    assignment: Partitions | None


@dataclass(frozen=True)
class ClassicJoin:
    """A JoinGroup of a member of the classic protocol, to a consumer group with members."""

    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    #: JoinGroup v4+ without an instance id (KIP-394)
    require_known_member_id: bool = False


@dataclass(frozen=True)
class ClassicJoinAnswer:
    member_id: str
    #: the member epoch, the generation of a classic member
    generation: int
    protocol_name: str


#: a record of ``__consumer_offsets`` (key, value)
Record = tuple[bytes, bytes | None]
#: the group coordinator's turning of a consumer group of classic members into a classic
#: group: given the group and its state without the member that left (or with the
#: classic member that replaced it), it makes that durable and takes the group over;
#: the flag says whether a rebalance starts (``consumer_group_migration.py``)
Downgrade = Callable[[ConsumerGroup, ConsumerGroup, bool], Awaitable[None]]


class ConsumerGroupCoordinator:
    """The consumer group protocol of every group; ``groups`` maps a group id to its
    :class:`ConsumerGroup` (the group coordinator's groups hold them)."""

    def __init__(self, config: ConsumerGroupConfig, io: ConsumerGroupIO, clock: Clock,
                 partition_of: Callable[[str], int], downgrade: Downgrade) -> None:
        self.config = config
        self.io = io
        self.clock = clock
        self.partition_of = partition_of
        self.downgrade = downgrade
        self.migration_policy = MigrationPolicy.parse(config.group_consumer_migration_policy)
        self.assignors = [name.strip() for name in config.group_consumer_assignors.split(",") if name.strip()]
        unknown = [name for name in self.assignors if name not in ASSIGNORS]
        if unknown or not self.assignors:
            raise ValueError(f"group.consumer.assignors: unknown assignor(s) {unknown}; known: {sorted(ASSIGNORS)}")
        #: members whose fencing is under way (so the timers schedule it once)
        self._fencing: set[tuple[str, str]] = set()

    # -- validation ------------------------------------------------------------------------

    def validate(self, request: Heartbeat) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not request.group_id:
            raise InvalidRequestError("GroupId can't be empty.")
        if request.member_id_required and not request.member_id:
            raise InvalidRequestError("MemberId can't be empty.")
        if request.instance_id == "":
            raise InvalidRequestError("InstanceId can't be empty.")
        epoch = request.member_epoch
        if epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
            if request.owned:
                raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise InvalidRequestError("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if request.instance_id is None:
                raise InvalidRequestError("InstanceId can't be null when MemberEpoch is -2.")
        elif epoch < LEAVE_EPOCH:
            raise InvalidRequestError(f"MemberEpoch {epoch} is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            raise UnsupportedAssignorError(
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.assignors)}.")
        if request.subscribed_topic_regex is not None:
            _compile(request.subscribed_topic_regex)

    # -- the heartbeat ---------------------------------------------------------------------

    async def heartbeat(self, group: ConsumerGroup, request: Heartbeat,
                        upgraded_from: list[Record] | None = None) -> HeartbeatAnswer:
        """One validated heartbeat of ``group`` (see the module docstring).
        ``upgraded_from``: ``group`` was a classic group a moment ago, converted in memory,
        and these are the tombstones of its classic records; they and every record of the
        group go in the heartbeat's append (the conversion and the join, durable at once)."""
        if request.member_epoch == JOIN_EPOCH and not request.member_id:  # v0: the coordinator names it,
            # with a Kafka Uuid as Kafka does (Uuid.randomUuid(), the generator of topic ids)
            request = replace(request, member_id=topic_id.to_string(topic_id.new_topic_id()))
        async with group.lock:
            _check_attached(group)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return await self._leave(group, request)
            return await self._heartbeat(group, request, upgraded_from)

    async def _heartbeat(self, group: ConsumerGroup, request: Heartbeat,
                         upgraded_from: list[Record] | None = None) -> HeartbeatAnswer:
        now = self.clock.now_ms()
        new = group.copy()
        member, is_new = self._member(new, request)
        updated = replace(
            member, client_id=request.client_id, client_host=request.client_host, classic=None,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            subscribed_topic_names=(tuple(sorted(set(request.subscribed_topic_names)))
                                    if request.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(request.subscribed_topic_regex or None
                                    if request.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor)
        reconciled = self._update_and_reconcile(new, member, updated, is_new, request.owned, request.describable)
        if upgraded_from is None:
            await self._write(group, new)
        else:  # the whole group is new to the log
            await self._write(group, new, written=ConsumerGroup(group.group_id), before=upgraded_from)
        self._restart_timers(group, member, reconciled, now)
        full = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != -1 and request.owned is not None
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None))
        changed = is_new or reconciled.assigned != member.assigned
        return HeartbeatAnswer(reconciled.member_id, reconciled.member_epoch,
                               self.config.group_consumer_heartbeat_interval_ms,
                               reconciled.assigned if full or changed else None)

    def _update_and_reconcile(self, new: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                              is_new: bool, owned: Partitions | None,
                              describable: Callable[[str], bool] | None) -> ConsumerMember:
        """Put ``updated`` (``member`` as its request changed it) in ``new``: a new member
        or subscription, or a change of the subscribed topics, bumps the group epoch and
        the target is recomputed when behind it; then the member is reconciled."""
        bump = is_new or _subscription(updated) != _subscription(member)
        new.members[updated.member_id] = updated
        partitions = self._subscribed_partitions(new, describable)
        subscription_hash = records.metadata_hash(partitions)
        if bump or subscription_hash != new.subscription_hash:
            new.group_epoch += 1
            new.subscription_hash = subscription_hash
        if new.group_epoch > new.assignment_epoch:
            self._assign(new, partitions)
        reconciled = reconcile(updated, new.assignment_epoch, new.target.get(updated.member_id, NO_PARTITIONS),
                               owned, new.owners(excluding=updated.member_id))
        new.members[reconciled.member_id] = reconciled
        return reconciled

    def _member(self, group: ConsumerGroup, request: Heartbeat) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from (a new one on a join), its epoch checked."""
        member_id, instance_id = request.member_id, request.instance_id
        if request.member_epoch == JOIN_EPOCH:
            if instance_id is not None:
                static = group.static_member(instance_id)
                if static is not None and static.member_id != member_id:
                    if static.classic is not None:  # a classic incarnation need not have left
                        return _replace_member(group, static, member_id), False
                    if static.member_epoch != STATIC_LEAVE_EPOCH:
                        raise UnreleasedInstanceIdError(
                            f"Static member {static.member_id} with instance id {instance_id} is not released yet.")
                    return self._replace_static(group, static, member_id), False
            if member_id in group.members:
                # the member rejoins (it lost its epoch): its old incarnation's partitions go
                del group.members[member_id]
            return ConsumerMember(member_id), True
        member = group.members.get(member_id)
        if instance_id is not None:
            static = group.static_member(instance_id)
            if static is None:
                raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
            if static.member_id != member_id:
                raise FencedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} was fenced by member {static.member_id}.")
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        _check_epoch(member, request.member_epoch, request.owned)
        return member, False

    @staticmethod
    def _replace_static(group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member back under a new member id takes over its predecessor's
        epoch and assignment (Kafka's replace of a static member): no rebalance."""
        del group.members[old.member_id]
        target = group.target.pop(old.member_id, NO_PARTITIONS)
        group.target[member_id] = target
        epoch = old.previous_member_epoch if old.member_epoch == STATIC_LEAVE_EPOCH else old.member_epoch
        return replace(old, member_id=member_id, member_epoch=epoch)

    def _subscribed_partitions(self, group: ConsumerGroup,
                               describable: Callable[[str], bool] | None = None) -> dict[str, int]:
        """Partition count of every existing topic a member subscribes to, by name or regex."""
        topics = {t for m in group.members.values() for t in m.subscribed_topic_names}
        patterns = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
        if patterns:
            for pattern in patterns:
                topics.update(self._resolved(group, patterns, describable)[pattern])
        return self.io.partition_counts(sorted(topics))

    def _resolved(self, group: ConsumerGroup, patterns: set[str],
                  describable: Callable[[str], bool] | None) -> dict[str, frozenset[str]]:
        """The topics each of the group's regexes matches, of those the principal of the
        heartbeat that resolves them may Describe (Kafka's TopicRegexResolver). Kept until
        a regex is added, the set of topics changes, or
        ``group.consumer.regex.refresh.interval.ms`` passes, so that members of principals
        that see different topics do not move the group epoch back and forth."""
        regexes = group.regexes
        names = frozenset(self.io.topic_names())
        now = self.clock.now_ms()
        if (not patterns <= regexes.matched.keys() or names != regexes.topics
                or now >= regexes.resolved_at_ms + self.config.group_consumer_regex_refresh_interval_ms):
            visible = [n for n in sorted(names) if describable is None or describable(n)]
            regexes.matched = {p: frozenset(n for n in visible if _compile(p).fullmatch(n)) for p in patterns}
            regexes.topics, regexes.resolved_at_ms = names, now
        return regexes.matched

    def _assign(self, group: ConsumerGroup, partitions: dict[str, int]) -> None:
        """A new target assignment at the group epoch, by the assignor the members prefer."""
        subscriptions = {m.member_id: self._topics_of(m, partitions) for m in group.members.values()}
        group.target = dict(ASSIGNORS[self.assignor_for(group)](subscriptions, partitions, group.target))
        group.assignment_epoch = group.group_epoch

    def assignor_for(self, group: ConsumerGroup) -> str:
        """Kafka's preferred server assignor: the one most members ask for, else the first configured."""
        wanted = [m.server_assignor for m in group.members.values() if m.server_assignor]
        return max(sorted(set(wanted)), key=wanted.count) if wanted else self.assignors[0]

    @staticmethod
    def _topics_of(member: ConsumerMember, partitions: dict[str, int]) -> frozenset[str]:
        topics = {t for t in member.subscribed_topic_names if t in partitions}
        if member.subscribed_topic_regex:
            compiled = _compile(member.subscribed_topic_regex)
            topics.update(t for t in partitions if compiled.fullmatch(t))
        return frozenset(topics)

    async def _leave(self, group: ConsumerGroup, request: Heartbeat) -> HeartbeatAnswer:
        member_id = request.member_id
        if request.instance_id is not None:
            static = group.static_member(request.instance_id)
            if static is None:
                raise UnknownMemberIdError(f"Instance id {request.instance_id} is unknown.")
            if static.member_id != member_id:
                raise FencedInstanceIdError(f"Instance id {request.instance_id} is held by {static.member_id}.")
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        new = group.copy()
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            previous = member.member_epoch if member.member_epoch != STATIC_LEAVE_EPOCH else member.previous_member_epoch
            new.members[member_id] = replace(member, member_epoch=STATIC_LEAVE_EPOCH, previous_member_epoch=previous,
                                             pending_revocation=NO_PARTITIONS,
                                             state=MemberState.STABLE)
            await self._write(group, new)
        else:
            _remove(new, member_id)
            await self._write_removal(group, new)
        group.rebalance_deadlines.pop(member_id, None)
        if request.member_epoch == LEAVE_EPOCH:
            group.session_deadlines.pop(member_id, None)
        return HeartbeatAnswer(member_id, request.member_epoch, self.config.group_consumer_heartbeat_interval_ms, None)

    async def _write_removal(self, group: ConsumerGroup, new: ConsumerGroup) -> None:
        """A member is gone (``new`` is the group without it): the group becomes classic
        if only classic members remain and the policy allows it, else ``new`` is written."""
        if may_downgrade(self.migration_policy, new):
            await self.downgrade(group, new, True)
            group.detached = True
        else:
            await self._write(group, new)

    # -- members of the classic protocol -------------------------------------------------------

    async def classic_join(self, group: ConsumerGroup, join: ClassicJoin) -> ClassicJoinAnswer:
        """A classic member's JoinGroup (see the module docstring)."""
        if join.protocol_type != consumer_protocol.PROTOCOL_TYPE or not _supports(group, join.protocols):
            raise InconsistentGroupProtocolError(f"Member {join.member_id}'s protocols are not supported.")
        member_id = join.member_id or topic_id.to_string(topic_id.new_topic_id())
        if join.require_known_member_id and not join.member_id:
            raise MemberIdRequiredError(member_id, f"join group {group.group_id!r} again as {member_id}")
        try:
            subscription = consumer_protocol.decode_full_subscription(join.protocols[0][1])
        except SchemaError as e:
            raise InconsistentGroupProtocolError(f"Member {member_id}'s subscription is malformed: {e}") from None
        async with group.lock:
            _check_attached(group)
            now = self.clock.now_ms()
            new = group.copy()
            member, is_new = self._classic_joining(new, member_id, join)
            updated = replace(
                member, instance_id=join.instance_id if join.instance_id is not None else member.instance_id,
                rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
                rebalance_timeout_ms=join.rebalance_timeout_ms, client_id=join.client_id,
                client_host=join.client_host, subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                classic=ClassicMemberMetadata(join.session_timeout_ms, join.protocols))
            owned = frozenset(tp for tp in subscription.owned_partitions if self.io.topic_id(tp[0]) is not None)
            reconciled = self._update_and_reconcile(new, member, updated, is_new, owned, None)
            replaced = join.instance_id is not None and not join.member_id and not is_new
            if replaced and may_downgrade(self.migration_policy, new):
                # the last member of the consumer protocol was a static one, and its classic
                # incarnation replaced it (Kafka's validateOnlineDowngradeWithReplacedMemberId):
                # the group is classic, Stable, and the member goes on with its assignment
                await self.downgrade(group, new, False)
                group.detached = True
                return ClassicJoinAnswer(reconciled.member_id, group.group_epoch, join.protocols[0][0])
            await self._write(group, new)
            group.session_deadlines[reconciled.member_id] = now + join.session_timeout_ms
            # it must SyncGroup within its rebalance timeout (Kafka's sync timeout)
            group.rebalance_deadlines[reconciled.member_id] = now + join.rebalance_timeout_ms
            return ClassicJoinAnswer(reconciled.member_id, reconciled.member_epoch, join.protocols[0][0])

    @staticmethod
    def _classic_joining(group: ConsumerGroup, member_id: str, join: ClassicJoin) -> tuple[ConsumerMember, bool]:
        """The member a classic JoinGroup is from: a static one without a member id takes
        over its instance's member (Kafka's getOrMaybeSubscribeStaticConsumerGroupMember),
        one with a member id must still hold its instance; a dynamic one is created when
        unknown."""
        if join.instance_id is None:
            member = group.members.get(member_id)
            return (member, False) if member is not None else (ConsumerMember(member_id), True)
        static = group.static_member(join.instance_id)
        if not join.member_id:
            if static is None:
                return ConsumerMember(member_id), True
            return _replace_member(group, static, member_id), False
        if static is None:
            raise UnknownMemberIdError(f"Instance id {join.instance_id} is unknown.")
        if static.member_id != member_id:
            raise FencedInstanceIdError(f"Static member {member_id} with instance id {join.instance_id} "
                                        f"was fenced by member {static.member_id}.")
        return static, False

    def classic_sync(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int,
                     protocol_type: str | None, protocol_name: str | None) -> bytes:
        """A classic member's SyncGroup: its current assignment (see the module docstring)."""
        member = self._classic_member(group, member_id, instance_id, generation)
        assert member.classic is not None
        if (protocol_type is not None and protocol_type != consumer_protocol.PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != member.classic.protocol_name):
            raise InconsistentGroupProtocolError(
                f"The protocol {protocol_type}/{protocol_name} from member {member_id} is not "
                f"{consumer_protocol.PROTOCOL_TYPE}/{member.classic.protocol_name}.")
        now = self.clock.now_ms()
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            group.rebalance_deadlines.setdefault(member_id, now + member.rebalance_timeout_ms)
            raise RebalanceInProgressError(f"A new rebalance is triggered in group {group.group_id} and "
                                           f"member {member_id} should rejoin to catch up.")
        group.rebalance_deadlines.pop(member_id, None)
        group.session_deadlines[member_id] = now + member.classic.session_timeout_ms
        version = subscription_version(member.classic.protocols[0][1]) if member.classic.protocols else 0
        return consumer_protocol.encode_assignment(sorted(member.assigned), version)

    def classic_heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                          generation: int) -> None:
        """A classic member's Heartbeat: its session restarts; REBALANCE_IN_PROGRESS when it
        must rejoin (see the module docstring)."""
        member = self._classic_member(group, member_id, instance_id, generation)
        assert member.classic is not None
        now = self.clock.now_ms()
        group.session_deadlines[member_id] = now + member.classic.session_timeout_ms
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waits_for_others(group, member))):
            group.rebalance_deadlines.setdefault(member_id, now + member.rebalance_timeout_ms)
            raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin")

    async def classic_leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> None:
        """A classic member's LeaveGroup (by member id), or from v3 an admin's removal of a
        static member by its instance id alone (``kafka-consumer-groups --delete``), which
        may be of either protocol, as in Kafka."""
        async with group.lock:
            _check_attached(group)
            by_admin = instance_id is not None and not member_id
            if instance_id is not None:
                static = group.static_member(instance_id)
                if static is None:
                    raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
                if member_id and static.member_id != member_id:
                    raise FencedInstanceIdError(f"Instance id {instance_id} is held by {static.member_id}.")
                member_id = static.member_id
            member = group.members.get(member_id)
            if member is None or (member.classic is None and not by_admin):
                raise UnknownMemberIdError(f"Member {member_id} is not a classic member of group {group.group_id}.")
            new = group.copy()
            _remove(new, member_id)
            await self._write_removal(group, new)
            group.session_deadlines.pop(member_id, None)
            group.rebalance_deadlines.pop(member_id, None)

    @staticmethod
    def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None,
                        generation: int) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember for a classic request, then its generation."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} "
                                            f"was fenced by member {member.member_id}.")
        if member.classic is None:
            raise UnknownMemberIdError(f"Member {member_id} does not use the classic protocol.")
        if generation != member.member_epoch:
            raise IllegalGenerationError(f"The request generation id {generation} is not equal to the member "
                                         f"epoch {member.member_epoch} of member {member_id}.")
        return member

    def _restart_timers(self, group: ConsumerGroup, before: ConsumerMember, after: ConsumerMember, now: int) -> None:
        """The session restarts; a member that must now revoke gets its rebalance timeout."""
        group.session_deadlines[after.member_id] = now + self.config.group_consumer_session_timeout_ms
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or after.member_id not in group.rebalance_deadlines:
                group.rebalance_deadlines[after.member_id] = now + max(after.rebalance_timeout_ms, 0)
        else:
            group.rebalance_deadlines.pop(after.member_id, None)

    async def _write(self, group: ConsumerGroup, new: ConsumerGroup, written: ConsumerGroup | None = None,
                     before: list[Record] | None = None) -> None:
        """Make the records from ``group`` (or from ``written``, what the log holds of it)
        to ``new`` durable, after ``before``, then take ``new``'s state."""
        appended = (before or []) + records.records_between(written or group, new, self.io.topic_id)
        if appended:
            await self.io.append_offsets_log(self.partition_of(group.group_id), appended)
        group.apply(new)

    # -- removal -----------------------------------------------------------------------------

    async def remove_all(self, group: ConsumerGroup) -> None:
        """Tombstones for the whole group (DeleteGroups, or a classic member taking over
        an empty group)."""
        async with group.lock:
            written = records.records_between(group, None, self.io.topic_id)
            await self.io.append_offsets_log(self.partition_of(group.group_id), written)

    def tick(self, groups: list[ConsumerGroup]) -> None:
        """Fence the members whose session or rebalance timeout ran out."""
        now = self.clock.now_ms()
        for group in groups:
            self._arm_loaded(group, now)
            expired = {m for m, deadline in group.session_deadlines.items() if now >= deadline}
            expired |= {m for m, deadline in group.rebalance_deadlines.items() if now >= deadline}
            for member_id in expired:
                key = (group.group_id, member_id)
                if key not in self._fencing:
                    self._fencing.add(key)
                    asyncio.get_running_loop().create_task(self._fence(group, member_id))

    def _arm_loaded(self, group: ConsumerGroup, now: int) -> None:
        """Timers for the members loaded from the log (Kafka's onLoaded): a full session
        to come back in, and one told to revoke its whole rebalance timeout to do so --
        else a member that died with the broker would hold its partitions for ever."""
        for member_id in group.members.keys() - group.session_deadlines.keys():
            member = group.members[member_id]
            group.session_deadlines[member_id] = now + (  # a classic member's session is its own
                member.classic.session_timeout_ms if member.classic is not None
                else self.config.group_consumer_session_timeout_ms)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                group.rebalance_deadlines[member_id] = now + max(member.rebalance_timeout_ms, 0)

    def next_deadline_ms(self, groups: list[ConsumerGroup]) -> int | None:
        deadlines = [d for g in groups for ds in (g.session_deadlines, g.rebalance_deadlines) for d in ds.values()]
        return min(deadlines, default=None)

    async def _fence(self, group: ConsumerGroup, member_id: str) -> None:
        try:
            async with group.lock:
                now = self.clock.now_ms()
                due = min(group.session_deadlines.get(member_id, now + 1),
                          group.rebalance_deadlines.get(member_id, now + 1))
                if group.detached or member_id not in group.members or due > now:
                    return  # it heartbeat meanwhile, or left, or the group is classic now
                log.info("member %s of consumer group %s is fenced: its session or rebalance timed out",
                         member_id, group.group_id)
                new = group.copy()
                _remove(new, member_id)
                await self._write_removal(group, new)
                group.session_deadlines.pop(member_id, None)
                group.rebalance_deadlines.pop(member_id, None)
        except KafkaError as e:
            log.warning("fencing member %s of group %s failed: %s", member_id, group.group_id, e)
        finally:
            self._fencing.discard((group.group_id, member_id))


def _check_attached(group: ConsumerGroup) -> None:
    """A request that waited for the group's lock while the group changed type (an online
    migration, or the failed write of one) is retried by its client."""
    if group.detached:
        raise CoordinatorNotAvailableError(f"group {group.group_id!r} changed type meanwhile; retry")


def _replace_member(group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
    """A static member's new incarnation (under ``member_id``) takes over its predecessor
    that used the classic protocol, or that one's over it: epoch 0 and the predecessor's
    assignment and target (Kafka's replaceMember), so it catches up without a rebalance."""
    del group.members[old.member_id]
    group.target[member_id] = group.target.pop(old.member_id, NO_PARTITIONS)
    return replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0)


def _supports(group: ConsumerGroup, protocols: tuple[tuple[str, bytes], ...]) -> bool:
    """Kafka's supportsClassicProtocols: a protocol every classic member supports."""
    classic = [m.classic for m in group.members.values() if m.classic is not None]
    names = {name for name, _ in protocols}
    return bool(names) and any(all(name in {n for n, _ in c.protocols} for c in classic) for name in names)


def _waits_for_others(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target another member still owns."""
    owners = group.owners(excluding=member.member_id)
    return any(tp in owners for tp in group.target.get(member.member_id, NO_PARTITIONS) - member.assigned)


def _remove(group: ConsumerGroup, member_id: str) -> None:
    """The member is gone: its partitions are free and the group epoch moves."""
    del group.members[member_id]
    group.target.pop(member_id, None)
    group.group_epoch += 1


def _subscription(member: ConsumerMember) -> tuple[object, ...]:
    return member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor


def _check_epoch(member: ConsumerMember, epoch: int, owned: Partitions | None) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: an epoch ahead of the member's is fenced; one
    behind is fenced unless it is the previous epoch and the member owns no more than
    its assignment (the answer that moved it on was lost)."""
    if epoch > member.member_epoch:
        raise FencedMemberEpochError(
            f"The consumer group member has a greater member epoch ({epoch}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")
    if epoch < member.member_epoch and (epoch != member.previous_member_epoch or owned is None
                                        or not owned <= member.assigned):
        raise FencedMemberEpochError(
            f"The consumer group member has a smaller member epoch ({epoch}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InvalidRegularExpressionError(f"SubscribedTopicRegex {pattern!r} is not a valid regular expression: {e}") from None
