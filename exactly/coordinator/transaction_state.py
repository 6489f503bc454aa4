"""The transaction state machine of one transactional id (Kafka's TransactionState
and TransactionMetadata).

Every change is two-phase, so that nothing in memory moves before the log says so:

1. ``prepare_*`` checks the transition against :data:`VALID_PREVIOUS`, builds an
   immutable :class:`TxnTransitMetadata` and sets ``pending_state`` (a second
   prepare while one is pending is refused);
2. the coordinator appends the transit to ``__transaction_state`` and waits for it
   to be durable;
3. :meth:`TransactionMetadata.complete_transition` re-checks the invariants (same
   producer or a new one, epoch same or +1, partitions only grow while Ongoing,
   time never goes back) and only then applies it. If the write failed,
   :meth:`TransactionMetadata.abort_transition` drops the pending state instead.

Two transaction protocols, chosen per request by its version as Kafka chooses them
(``client_transaction_version``, which the log keeps): version 0/1 (KIP-98 plus KIP-360
epoch bumps), where markers carry the producer's current epoch, and version 2 (KIP-890
part 2), where every EndTxn bumps the epoch at its PrepareCommit/PrepareAbort -- the
markers carry the bumped epoch, so a late write of the ended transaction is refused
everywhere -- and, once that epoch is exhausted, the client moves to
``next_producer_id`` at epoch 0 when the transaction completes (the old id is kept as
``last_producer_id``, Kafka's PreviousProducerId, so a retried EndTxn is recognised).
Version 2 may also abort a transaction that has no partition (the client cannot know
whether its Produce added one), from Empty, CompleteCommit or CompleteAbort. Either way
a timed-out transaction is aborted with the epoch bumped once so its zombie is fenced.

KIP-939's keepPreparedTxn (``prepare_keep_prepared``) gives a two-phase transaction
two identities, as Kafka does: ``producer_id``/``producer_epoch`` stay the ones its
data was written with (its markers carry them), and ``next_producer_id``/
``next_producer_epoch`` are what the recovering client was given -- the epoch bumped,
so the writer that prepared it is fenced. The client's identity
(``client_producer_id``/``client_producer_epoch``) is the one requests must present;
the transaction's completion makes it the only one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from exactly.storage.errors import ConcurrentTransactionsError, InvariantViolation
from exactly.storage.record_batch import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ControlType

#: KIP-939: the transactions of a producer initialised with enable2Pc never time out
#: (an external coordinator completes them); Kafka stores Int32.MAX as their timeout,
#: so the transaction log's format needs no new field
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1


@dataclass(frozen=True)
class StateFlags:
    """What a state says about the transaction in it. Every set of states the broker
    needs is derived from these (Kafka's TransactionState carries
    ``expirationAllowed`` the same way), never written out by hand."""

    #: a transaction is in progress: its records may hold back the LSO
    open: bool = False
    #: its end is decided, or its producer is being fenced first: other calls wait for
    #: the completion or answer CONCURRENT_TRANSACTIONS
    ending: bool = False
    #: the decision is in the log (the point of no return); markers are being written
    prepared: bool = False
    #: every marker is durable
    complete: bool = False
    #: transactional.id.expiration.ms may tombstone the id (Kafka's expirationAllowed)
    expiration_allowed: bool = False
    #: how the transaction ends, once that is decided
    outcome: ControlType | None = None


class TransactionState(enum.Enum):
    """The state of a transactional id; ``id`` is the byte persisted in the log, and
    the :class:`StateFlags` are readable as ``is_open``, ``is_ending``,
    ``is_prepared``, ``is_complete``, ``expiration_allowed`` and ``outcome``."""

    EMPTY = (0, "Empty", StateFlags(expiration_allowed=True))
    """No transaction in progress. Entered by InitProducerId (a new id or an epoch bump)."""
    ONGOING = (1, "Ongoing", StateFlags(open=True))
    """A transaction is open. Entered by AddPartitionsToTxn / AddOffsetsToTxn."""
    PREPARE_COMMIT = (2, "PrepareCommit", StateFlags(open=True, ending=True, prepared=True,
                                                     outcome=ControlType.COMMIT))
    """Decided to commit; markers are being written. Entered by EndTxn(commit)."""
    PREPARE_ABORT = (3, "PrepareAbort", StateFlags(open=True, ending=True, prepared=True,
                                                   outcome=ControlType.ABORT))
    """Decided to abort; markers are being written. Entered by EndTxn(abort), by
    InitProducerId fencing an open transaction, or by the transaction timeout."""
    COMPLETE_COMMIT = (4, "CompleteCommit", StateFlags(complete=True, expiration_allowed=True,
                                                       outcome=ControlType.COMMIT))
    """Committed: every COMMIT marker is durable."""
    COMPLETE_ABORT = (5, "CompleteAbort", StateFlags(complete=True, expiration_allowed=True,
                                                     outcome=ControlType.ABORT))
    """Aborted: every ABORT marker is durable."""
    DEAD = (6, "Dead", StateFlags())
    """The transactional id expired (transactional.id.expiration.ms); tombstoned."""
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence", StateFlags(open=True, ending=True,
                                                              outcome=ControlType.ABORT))
    """The epoch is being bumped to fence a producer before its transaction is aborted
    (InitProducerId with a transaction open, or the timeout). Never written to the log."""

    def __init__(self, id_: int, display: str, flags: StateFlags) -> None:
        self.id = id_
        self.display = display
        self.is_open = flags.open
        self.is_ending = flags.ending
        self.is_prepared = flags.prepared
        self.is_complete = flags.complete
        self.expiration_allowed = flags.expiration_allowed
        self.outcome = flags.outcome

    @classmethod
    def from_id(cls, id_: int) -> "TransactionState":
        for state in cls:
            if state.id == id_:
                return state
        raise ValueError(f"unknown transaction state id {id_}")

    @classmethod
    def from_display(cls, display: str) -> "TransactionState":
        """The state named ``display`` (Kafka's name, e.g. ``PrepareCommit``)."""
        for state in cls:
            if state.display == display:
                return state
        raise ValueError(f"unknown transaction state {display!r}")


S = TransactionState

#: For each state, the states it may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class AbortCause(enum.Enum):
    """Why a transaction was aborted; ``value`` is what the log and the mirror keep."""

    CLIENT = "client"
    """Its producer asked: EndTxn(abort)."""
    TIMEOUT = "timeout"
    """It was open longer than its transaction.timeout.ms: the coordinator fenced and aborted it."""
    FENCED = "fenced"
    """A new instance of its transactional id called InitProducerId (init_transactions)."""
    ADMIN = "admin"
    """An operator aborted the transaction (the console's or the API's Abort)."""
    ADMIN_PARTITION = "admin-partition"
    """An operator aborted its producer on one partition (KIP-664, AbortTransaction)."""

    @property
    def fences(self) -> bool:
        """Whether this abort bumps the producer's epoch (every cause but the client's own)."""
        return self is not AbortCause.CLIENT

    @property
    def label(self) -> str:
        """What happened, as a person reads it."""
        return _ABORT_LABELS[self]


@dataclass(frozen=True)
class AbortReason:
    """Why a transaction was aborted and who did it (``actor``: a producer, the
    coordinator, an operator's console or API request with its address). Carried by
    the PrepareAbort and CompleteAbort records as record headers
    (``exactly/coordinator/transaction_log.py``), so the SQLite mirror rebuilt from the log
    keeps it."""

    cause: AbortCause
    actor: str

    def describe(self) -> str:
        return f"{self.cause.label} ({self.actor})"


_ABORT_LABELS = {AbortCause.CLIENT: "aborted by its producer",
                 AbortCause.TIMEOUT: "its transaction timed out",
                 AbortCause.FENCED: "fenced by a new instance (InitProducerId)",
                 AbortCause.ADMIN: "aborted by an operator",
                 AbortCause.ADMIN_PARTITION: "aborted on a partition by an operator"}


class IllegalTransitionError(InvariantViolation):
    """A transition the state table does not allow. The coordinator answers every
    request that could ask for one with its Kafka error first, so this is a bug."""


@dataclass(frozen=True)
class TxnTransitMetadata:
    """What one transition will make the metadata look like; what the log records."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    #: why the transaction is (being) aborted: PrepareAbort and CompleteAbort only
    abort_reason: AbortReason | None = None
    #: KIP-939: the producer id and epoch keepPreparedTxn gave the recovering client
    #: (-1: the transaction has one identity); transaction version 2: the producer id the
    #: client moves to when this transaction completes (its epoch exhausted), epoch -1
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    #: the transaction version of the client's last request (0: KIP-98/KIP-360, 2: KIP-890 part 2)
    client_transaction_version: int = 0


@dataclass
class TransactionMetadata:
    """The coordinator's in-memory state of one transactional id."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    abort_reason: AbortReason | None = None
    #: the last epoch an abort fenced, and why: a call with that epoch is told the reason
    #: (a producer whose transaction timed out learns that, not only that it is fenced)
    fenced: tuple[int, AbortReason] | None = None
    #: KIP-939, transaction version 2: see the module docstring (-1: none)
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    #: the transaction version of the client's last request (see TxnTransitMetadata)
    client_transaction_version: int = 0

    @property
    def two_phase_commit(self) -> bool:
        """Initialised with KIP-939's enable2Pc: never timed out, may be kept prepared."""
        return self.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    @property
    def kept(self) -> bool:
        """keepPreparedTxn kept this Ongoing transaction for a recovering client."""
        return self.next_producer_epoch != NO_PRODUCER_EPOCH

    @property
    def client_producer_id(self) -> int:
        """The producer id the current client was given."""
        return self.next_producer_id if self.kept else self.producer_id

    @property
    def client_producer_epoch(self) -> int:
        """The epoch the current client was given; every other one is fenced."""
        return self.next_producer_epoch if self.kept else self.producer_epoch

    # -- prepare ---------------------------------------------------------------------

    def _prepare(self, state: TransactionState, **changes: Any) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise ConcurrentTransactionsError(
                f"transactional id {self.transactional_id!r} is already moving to "
                f"{self.pending_state.display}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: {self.state.display} -> "
                f"{state.display} is not a valid transition")
        transit = replace(self._current(), state=state, **changes)
        if state.outcome is not ControlType.ABORT:  # the reason goes with its abort, no further
            transit = replace(transit, abort_reason=None)
        self.pending_state = state
        return transit

    def _current(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(
            producer_id=self.producer_id, last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch, last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms, state=self.state,
            partitions=frozenset(self.partitions), txn_start_timestamp=self.txn_start_timestamp,
            txn_last_update_timestamp=self.txn_last_update_timestamp, abort_reason=self.abort_reason,
            next_producer_id=self.next_producer_id, next_producer_epoch=self.next_producer_epoch,
            client_transaction_version=self.client_transaction_version)

    def prepare_increment_epoch(self, txn_timeout_ms: int, now_ms: int,
                                remember_last_epoch: bool = False) -> TxnTransitMetadata:
        """InitProducerId on a completed or empty id: epoch + 1, state Empty.

        ``remember_last_epoch`` only for a KIP-360 bump by the current producer: a
        retry of that very bump is then answered with its result. An ordinary
        InitProducerId (a new instance) forgets the last epoch (Kafka: -1), so the
        instance it fences can never "retry" its way to the new epoch."""
        return self._prepare(S.EMPTY, producer_epoch=self.producer_epoch + 1,
                             last_producer_epoch=self.producer_epoch if remember_last_epoch else NO_PRODUCER_EPOCH,
                             txn_timeout_ms=txn_timeout_ms, partitions=frozenset(), txn_start_timestamp=-1,
                             txn_last_update_timestamp=now_ms)

    def prepare_new_producer_id(self, producer_id: int, txn_timeout_ms: int, now_ms: int,
                                remember_last_epoch: bool = False) -> TxnTransitMetadata:
        """InitProducerId when the epoch is exhausted (or the id is new): a fresh
        producer id at epoch 0 (``remember_last_epoch`` as for an epoch bump)."""
        return self._prepare(S.EMPTY, producer_id=producer_id, last_producer_id=self.producer_id,
                             producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if remember_last_epoch else NO_PRODUCER_EPOCH,
                             txn_timeout_ms=txn_timeout_ms, partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=now_ms)

    def prepare_fence_epoch(self, now_ms: int) -> TxnTransitMetadata:
        """Bump the epoch of an open transaction so its producer is fenced before the
        abort (never logged: the PrepareAbort that follows carries the new epoch).

        Always +1, also from the last usable epoch (exhausted) to MAX_PRODUCER_EPOCH:
        the markers must carry an epoch the fenced producer does not have, or its
        late batches would open a new transaction on the partition. Nobody is ever
        given MAX_PRODUCER_EPOCH (the next InitProducerId moves to a new producer id). The last
        epoch is forgotten, as Kafka does, so the fenced producer cannot bump back.
        A kept transaction (KIP-939) is fenced above its client's epoch too, and
        loses its second identity: the abort ends it with the producer id its data has."""
        top = self.client_producer_epoch if self.client_producer_id == self.producer_id else self.producer_epoch
        if top >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: cannot fence epoch {top}")
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=top + 1,
                             last_producer_epoch=NO_PRODUCER_EPOCH, next_producer_id=NO_PRODUCER_ID,
                             next_producer_epoch=NO_PRODUCER_EPOCH, txn_last_update_timestamp=now_ms)

    def prepare_keep_prepared(self, now_ms: int, new_producer_id: int | None = None) -> TxnTransitMetadata:
        """KIP-939 keepPreparedTxn on an Ongoing two-phase transaction: it stays as it
        is (data, partitions, the producer id and epoch its markers carry), and the
        recovering client gets the client epoch + 1 -- or ``new_producer_id`` at epoch
        0 when that epoch is exhausted -- so whoever held the transaction before
        (the writer that prepared it, an earlier recovery) is fenced."""
        if new_producer_id is None:
            next_id, next_epoch = self.client_producer_id, self.client_producer_epoch + 1
        else:
            next_id, next_epoch = new_producer_id, 0
        return self._prepare(S.ONGOING, next_producer_id=next_id, next_producer_epoch=next_epoch,
                             txn_last_update_timestamp=now_ms)

    def prepare_add_partitions(self, partitions: set[tuple[str, int]], now_ms: int,
                               transaction_version: int = 0) -> TxnTransitMetadata:
        """AddPartitionsToTxn / AddOffsetsToTxn, or (``transaction_version`` 2) a Produce
        or TxnOffsetCommit adding its partition: state Ongoing with the union of
        partitions; the transaction timer starts with the first partition."""
        starting = not self.state.is_open
        return self._prepare(
            S.ONGOING,
            partitions=frozenset(partitions if starting else self.partitions | partitions),
            txn_start_timestamp=now_ms if starting else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms, client_transaction_version=transaction_version)

    def prepare_abort_or_commit(self, commit: bool, now_ms: int, reason: AbortReason | None = None,
                                transaction_version: int | None = None,
                                next_producer_id: int = NO_PRODUCER_ID) -> TxnTransitMetadata:
        """EndTxn (or the coordinator's own abort): PrepareCommit or PrepareAbort
        (with why, ``reason``). An EndTxn of ``transaction_version`` 2 bumps the epoch
        (the markers carry the new one) and, when the current epoch is exhausted, names
        ``next_producer_id``, which the client gets at completion; it may abort a
        transaction with no partition (started now, as Kafka counts it). The
        coordinator's own aborts (None) keep the version the client last used."""
        bump = transaction_version is not None and transaction_version >= 2 and not self.kept
        changes: dict[str, Any] = {}
        if bump:
            changes = {"producer_epoch": self.producer_epoch + 1, "last_producer_epoch": self.producer_epoch,
                       "next_producer_id": next_producer_id}
        if not self.state.is_open:
            changes["txn_start_timestamp"] = now_ms
        if transaction_version is not None:
            changes["client_transaction_version"] = transaction_version
        return self._prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                             txn_last_update_timestamp=now_ms, abort_reason=None if commit else reason, **changes)

    def prepare_complete(self, now_ms: int, fenced_epoch: int = NO_PRODUCER_EPOCH) -> TxnTransitMetadata:
        """Every marker is durable: CompleteCommit or CompleteAbort, partitions cleared;
        a kept transaction's client identity becomes the only one (KIP-939). A marker
        an operator forced onto a partition at ``fenced_epoch`` (above this epoch:
        the partition had seen a higher one) moves the epoch there, so the producer's
        next epoch is one every partition accepts."""
        target = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if self.next_producer_id != NO_PRODUCER_ID and not self.kept:
            # transaction version 2 at an exhausted epoch: the client moves to the next
            # producer id; the last epoch stays the one it last held (MAX - 1), as in Kafka
            return self._prepare(target, partitions=frozenset(), txn_last_update_timestamp=now_ms,
                                 producer_id=self.next_producer_id, producer_epoch=0,
                                 last_producer_id=self.producer_id, last_producer_epoch=self.producer_epoch - 1,
                                 next_producer_id=NO_PRODUCER_ID, next_producer_epoch=NO_PRODUCER_EPOCH)
        epoch = self.client_producer_epoch
        if self.client_producer_id == self.producer_id:
            epoch = max(epoch, fenced_epoch)
        return self._prepare(target, partitions=frozenset(), txn_last_update_timestamp=now_ms,
                             producer_id=self.client_producer_id, producer_epoch=epoch,
                             next_producer_id=NO_PRODUCER_ID, next_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_dead(self, now_ms: int) -> TxnTransitMetadata:
        """transactional.id.expiration.ms passed with no transaction open."""
        return self._prepare(S.DEAD, partitions=frozenset(), txn_last_update_timestamp=now_ms)

    # -- complete ----------------------------------------------------------------------

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply ``transit`` after its log write is durable, re-checking invariants."""
        if self.pending_state is not transit.state:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: completing {transit.state.display} "
                f"but the pending state is {self.pending_state.display if self.pending_state else None}")
        same_producer = transit.producer_id == self.producer_id
        # +1, or up to one above what a kept transaction's client was given (KIP-939);
        # a completion forced past refused markers adopts their epoch (prepare_complete)
        highest = self.client_producer_epoch if self.client_producer_id == self.producer_id else self.producer_epoch
        if transit.state.is_complete:
            highest = MAX_PRODUCER_EPOCH
        if same_producer and not self.producer_epoch <= transit.producer_epoch <= highest + 1:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: epoch {self.producer_epoch} -> "
                f"{transit.producer_epoch}")
        if transit.state is S.ONGOING and self.state is S.ONGOING and not self.partitions <= transit.partitions:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: partitions may only grow while Ongoing")
        if transit.txn_last_update_timestamp < self.txn_last_update_timestamp:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: update time went back from "
                f"{self.txn_last_update_timestamp} to {transit.txn_last_update_timestamp}")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.abort_reason = transit.abort_reason
        self.next_producer_id = transit.next_producer_id
        self.next_producer_epoch = transit.next_producer_epoch
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None

    def abort_transition(self) -> None:
        """The log write failed: forget the pending transition, keep the state."""
        self.pending_state = None

    def snapshot(self) -> TxnTransitMetadata:
        """The current state as an immutable value (for queries and the mirror)."""
        return self._current()
