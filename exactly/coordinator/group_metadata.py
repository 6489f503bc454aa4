"""A consumer group: its state machine, members, generation and offsets.

The classic group protocol (Kafka's ``GroupMetadata``): members join
(PreparingRebalance), the generation is bumped and a leader chosen
(CompletingRebalance), the leader's assignment is handed out at SyncGroup
(Stable). Offsets are kept twice: ``committed`` (visible to OffsetFetch) and
``pending`` -- transactional offset commits keyed by the producer id whose
COMMIT marker will make them committed and whose ABORT marker drops them
(the seed's Consumer Coordinator section, and KIP-447's fencing by generation).
Each offset remembers where it was appended to ``__consumer_offsets``; when a
transaction commits, its offsets replace only older ones -- a plain commit
appended after them stays (Kafka's ``olderThan``), live and on replay alike.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exactly.storage.errors import InvariantViolation

from exactly.coordinator.consumer_group import ConsumerGroup

if TYPE_CHECKING:
    from exactly.coordinator.group_coordinator import JoinResult

TopicPartition = tuple[str, int]


class GroupState(enum.Enum):
    """Where a group is in a rebalance; the value is Kafka's display name."""

    EMPTY = "Empty"
    """No members; offsets may still be committed (by a standalone consumer)."""
    PREPARING_REBALANCE = "PreparingRebalance"
    """A member joined, left or timed out; waiting for every member to (re)join."""
    COMPLETING_REBALANCE = "CompletingRebalance"
    """Everyone joined, the generation is bumped; waiting for the leader's SyncGroup."""
    STABLE = "Stable"
    """Every member has its assignment and heartbeats."""
    DEAD = "Dead"
    """The group is deleted."""


G = GroupState

VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    G.PREPARING_REBALANCE: frozenset({G.STABLE, G.COMPLETING_REBALANCE, G.EMPTY}),
    G.COMPLETING_REBALANCE: frozenset({G.PREPARING_REBALANCE}),
    G.STABLE: frozenset({G.COMPLETING_REBALANCE}),
    G.DEAD: frozenset({G.STABLE, G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE, G.EMPTY, G.DEAD}),
    G.EMPTY: frozenset({G.PREPARING_REBALANCE}),
}


class IllegalGroupTransitionError(InvariantViolation):
    """A group transition VALID_PREVIOUS does not allow: a bug in the coordinator,
    which answers members with their Kafka errors before it moves a group."""


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    commit_timestamp: int = -1


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    #: when the member is removed unless something restarts its session first (Kafka's
    #: heartbeat expiration: a join completing, SyncGroup, Heartbeat, OffsetCommit)
    session_deadline_ms: int
    assignment: bytes = b""
    #: joined but no join has completed for it yet: its JoinGroup itself can expire
    is_new: bool = False
    #: set while the member waits for the join phase / the leader's assignment
    join_waiter: asyncio.Future[JoinResult] | None = None
    #: answered with the member's assignment
    sync_waiter: asyncio.Future[bytes] | None = None

    def has_expired(self, now_ms: int) -> bool:
        """Past its session deadline and not excused (Kafka's ``hasSatisfiedHeartbeat``
        negated): a known member waiting in JoinGroup or SyncGroup cannot heartbeat, so
        its session does not run then; a new member's JoinGroup is not excused."""
        if now_ms <= self.session_deadline_ms:
            return False
        return self.is_new or (self.join_waiter is None and self.sync_waiter is None)

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(frozen=True)
class InitialDelay:
    """One phase of ``group.initial.rebalance.delay.ms`` (Kafka's ``InitialDelayedJoin``):
    the phase lasts ``delay_ms``; if a new member joined meanwhile, another phase
    follows while ``remaining_ms`` (of the rebalance timeout) is left."""

    delay_ms: int
    remaining_ms: int


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = G.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    state_timestamp_ms: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    #: group.instance.id -> member id (static membership)
    static_members: dict[str, str] = field(default_factory=dict)
    #: member ids handed out with MEMBER_ID_REQUIRED (KIP-394) whose JoinGroup has not come
    #: back yet -> when they are forgotten (the session timeout of the JoinGroup that asked)
    pending_members: dict[str, int] = field(default_factory=dict)
    committed: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    #: producer id -> offsets it committed inside its open transaction
    pending: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    #: where each committed / pending offset was appended (a number that grows in log order)
    committed_at: dict[TopicPartition, int] = field(default_factory=dict, repr=False)
    pending_at: dict[int, dict[TopicPartition, int]] = field(default_factory=dict, repr=False)
    #: PreparingRebalance ends by then: the rebalance timeout, or the current initial delay
    rebalance_deadline_ms: int = -1
    #: set while the first rebalance of an empty group holds out for more joiners
    initial_delay: InitialDelay | None = None
    #: a new member joined the generation-0 rebalance since the initial delay last ran out
    new_member_added: bool = False
    #: members the completed join is still waiting a SyncGroup from, and until when
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline_ms: int = -1
    #: set while the group is a KIP-848 consumer group ("consumer" type): its members,
    #: epochs and assignments; the offsets above are the group's either way
    consumer: ConsumerGroup | None = None

    @property
    def group_type(self) -> str:
        """Kafka's group type: ``consumer`` (KIP-848) or ``classic``."""
        return "consumer" if self.consumer is not None else "classic"

    def transition(self, state: GroupState, now_ms: int) -> None:
        """Move to ``state`` if the table allows it (the one way states change)."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalGroupTransitionError(
                f"group {self.group_id!r}: {self.state.value} -> {state.value} is not a valid transition")
        self.state = state
        self.state_timestamp_ms = now_ms

    def has_all_members_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member waits in JoinGroup and no member id
        handed out with MEMBER_ID_REQUIRED is still to come back."""
        return not self.pending_members and all(m.join_waiter is not None for m in self.members.values())

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """Kafka's replaceStaticMember: the member of ``group_instance_id`` goes on under a
        new member id -- its assignment, leadership and pending SyncGroup included. The
        caller fences the old incarnation's waiting requests first."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader == old_member_id:
            self.leader = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of its members: how long a join or sync phase waits."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def select_protocol(self) -> str | None:
        """The protocol every member supports that the members prefer most (Kafka's vote)."""
        candidates = None
        for member in self.members.values():
            names = {name for name, _ in member.protocols}
            candidates = names if candidates is None else candidates & names
        if not candidates:
            return None
        votes: dict[str, int] = {}
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        return max(sorted(votes), key=lambda name: votes[name])

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member with these protocols join (same type, one protocol in common)?"""
        if not self.members:
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in self.members.values())

    def has_pending(self, tp: TopicPartition) -> bool:
        return any(tp in offsets for offsets in self.pending.values())

    def commit(self, tp: TopicPartition, offset: CommittedOffset, appended_at: int) -> None:
        """Make ``offset`` (appended at ``appended_at``) the committed one, unless the
        committed one was appended after it."""
        if appended_at >= self.committed_at.get(tp, -1):
            self.committed[tp] = offset
            self.committed_at[tp] = appended_at

    def delete_offset(self, tp: TopicPartition, appended_at: int) -> None:
        """A tombstone for the partition's committed offset."""
        if appended_at >= self.committed_at.get(tp, -1):
            self.committed.pop(tp, None)
            self.committed_at[tp] = appended_at

    def add_pending(self, producer_id: int, tp: TopicPartition, offset: CommittedOffset,
                    appended_at: int) -> None:
        """An offset committed inside ``producer_id``'s open transaction."""
        self.pending.setdefault(producer_id, {})[tp] = offset
        self.pending_at.setdefault(producer_id, {})[tp] = appended_at

    def drop_pending(self, topic: str) -> None:
        """Forget the pending transactional offsets on ``topic`` (it was deleted): its
        producers' markers then commit nothing there."""
        for producer_id, offsets in list(self.pending.items()):
            for tp in [tp for tp in offsets if tp[0] == topic]:
                del offsets[tp]
                self.pending_at[producer_id].pop(tp, None)
            if not offsets:
                del self.pending[producer_id]
                self.pending_at.pop(producer_id, None)

    def complete_pending(self, producer_id: int, commit: bool) -> None:
        """Apply a transaction marker: pending offsets become committed (where nothing
        newer was committed meanwhile), or vanish."""
        offsets = self.pending.pop(producer_id, None)
        appended = self.pending_at.pop(producer_id, {})
        if commit and offsets:
            for tp, offset in offsets.items():
                self.commit(tp, offset, appended.get(tp, -1))
