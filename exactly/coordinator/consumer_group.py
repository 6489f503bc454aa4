"""A KIP-848 consumer group: its epochs, members, target assignment and reconciliation.

The broker assigns (``exactly/coordinator/assignors.py``) and the members converge
on the assignment one heartbeat at a time (Kafka's ``ConsumerGroup``,
``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``):

* the **group epoch** moves when the membership or the subscriptions change (a
  member joins, leaves or is fenced; a subscription or a subscribed topic changes);
* the **target assignment** is recomputed for it, and the **assignment epoch**
  becomes the group epoch;
* each **member epoch** catches up with the assignment epoch on the member's own
  heartbeats. A member that must give partitions up first gets an assignment
  without them (state ``UNREVOKED_PARTITIONS``, its epoch unchanged) and moves on
  only when a heartbeat reports it no longer owns them; a member whose new
  partitions are still owned by another gets the epoch and the free ones
  (``UNRELEASED_PARTITIONS``) and the rest once released. So a partition is never
  given to a new owner before the old one revoked it -- no stop-the-world rebalance.

Members are immutable values (:class:`ConsumerMember`): a heartbeat computes the
group's next state from them, the records of the difference are made durable in
``__consumer_offsets`` (``consumer_group_records.py``), and only then is the state
swapped in (:meth:`ConsumerGroup.apply`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Partitions = frozenset()

#: member epochs a heartbeat can carry besides a real epoch
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
#: a static member leaving for a moment (it keeps its assignment for its session)
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.Enum):
    """Where a member is in its reconciliation; the value is Kafka's persisted byte."""

    STABLE = 0
    """It owns its whole target assignment at the assignment epoch."""
    UNREVOKED_PARTITIONS = 1
    """It must revoke partitions before it may move to the next epoch."""
    UNRELEASED_PARTITIONS = 2
    """It is at the assignment epoch but waits for partitions others still own."""


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member of the classic protocol inside a consumer group joined with (Kafka's
    ``ClassicMemberMetadata``, persisted with the member): its session timeout and its
    JoinGroup protocols, each a name and a ``ConsumerProtocolSubscription``."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup and SyncGroup answers name: its first."""
        return self.protocols[0][0] if self.protocols else ""


class ConsumerGroupState(enum.Enum):
    """A consumer group's state (Kafka's ``ConsumerGroupState``), derived, never stored."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerMember:
    """One member as the group knows it (Kafka's ``ConsumerGroupMember``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NO_PARTITIONS
    pending_revocation: Partitions = NO_PARTITIONS
    #: set for a member of the classic protocol (JoinGroup, SyncGroup, Heartbeat) inside
    #: the consumer group, which an online migration lets in; None for a KIP-848 member
    classic: ClassicMemberMetadata | None = None

    def metadata(self) -> tuple[object, ...]:
        """What ``ConsumerGroupMemberMetadata`` persists of it."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.server_assignor, self.rebalance_timeout_ms, self.classic)

    def current_assignment(self) -> tuple[object, ...]:
        """What ``ConsumerGroupCurrentMemberAssignment`` persists of it."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation)

    def owns(self) -> Partitions:
        return self.assigned | self.pending_revocation


@dataclass
class ResolvedRegexes:
    """What the group's regex subscriptions matched, when, among which topics (not
    persisted: matched again after a restart, as Kafka does when its records are gone)."""

    matched: dict[str, frozenset[str]] = field(default_factory=dict)
    topics: frozenset[str] = frozenset()
    resolved_at_ms: int = 0


@dataclass
class ConsumerGroup:
    """The consumer-protocol side of a group; its offsets stay on ``GroupMetadata``."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: member id -> the partitions the target assignment gives it
    target: dict[str, Partitions] = field(default_factory=dict)
    #: a hash of the subscribed topics' partition counts the target was computed for; a
    #: change bumps the group epoch (Kafka 4.1's MetadataHash)
    subscription_hash: int = 0
    #: not persisted: when each member is fenced unless it heartbeats, and when one that
    #: must revoke is fenced unless it has
    session_deadlines: dict[str, int] = field(default_factory=dict)
    rebalance_deadlines: dict[str, int] = field(default_factory=dict)
    #: not persisted: the topics the regex subscriptions match (``ConsumerGroupCoordinator._resolved``)
    regexes: ResolvedRegexes = field(default_factory=ResolvedRegexes, compare=False)
    #: not persisted: the group changed type (an online migration) and this object is no
    #: longer the group's; a request that waited for its lock meanwhile is retried
    detached: bool = field(default=False, compare=False)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's maybeUpdateGroupState: Empty, Assigning (target behind the group
        epoch), Reconciling (a member behind the target), else Stable."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values() if m.member_epoch != STATIC_LEAVE_EPOCH):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def copy(self) -> ConsumerGroup:
        """A copy whose dicts can change without touching this one (members are immutable)."""
        return dataclasses.replace(self, members=dict(self.members), target=dict(self.target),
                                   session_deadlines=self.session_deadlines,
                                   rebalance_deadlines=self.rebalance_deadlines, lock=self.lock)

    def apply(self, other: ConsumerGroup) -> None:
        """Take ``other``'s state (its records are durable)."""
        self.group_epoch, self.assignment_epoch = other.group_epoch, other.assignment_epoch
        self.members, self.target = other.members, other.target
        self.subscription_hash = other.subscription_hash
        for deadlines in (self.session_deadlines, self.rebalance_deadlines):
            for member_id in [m for m in deadlines if m not in self.members]:
                del deadlines[member_id]

    def owners(self, excluding: str) -> dict[TopicPartition, str]:
        """Partition -> the member that owns it (assigned or still to revoke), other than ``excluding``."""
        return {tp: m.member_id for m in self.members.values() if m.member_id != excluding for tp in m.owns()}


def reconcile(member: ConsumerMember, assignment_epoch: int, target: Partitions,
              owned: Partitions | None, owners: dict[TopicPartition, str]) -> ConsumerMember:
    """The member's next state towards ``target`` (Kafka's ``CurrentAssignmentBuilder``).
    ``owned`` is what its heartbeat says it owns (None: not said); ``owners`` the
    partitions other members still own."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & member.pending_revocation:
            return member  # it has not revoked them yet
        return _next_assignment(member, assignment_epoch, target, owners)
    if member.member_epoch == assignment_epoch and member.state is MemberState.STABLE:
        return member
    return _next_assignment(member, assignment_epoch, target, owners)


def _next_assignment(member: ConsumerMember, assignment_epoch: int, target: Partitions,
                     owners: dict[TopicPartition, str]) -> ConsumerMember:
    keep = member.assigned & target
    revoke = member.assigned - target
    if revoke:
        return dataclasses.replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=keep,
                                   pending_revocation=revoke)
    unreleased = frozenset(tp for tp in target - keep if tp in owners)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = member.previous_member_epoch if member.member_epoch == assignment_epoch else member.member_epoch
    return dataclasses.replace(member, state=state, member_epoch=assignment_epoch, previous_member_epoch=previous,
                               assigned=target - unreleased, pending_revocation=NO_PARTITIONS)
