"""The producer's side of idempotence and transactions (Kafka's client
``TransactionManager``): its producer id and epoch, its transaction state, and the
partitions and groups its transaction holds.

The states and the transitions between them::

    Uninitialized --init--> Ready --begin--> InTransaction --commit--> CommittingTransaction --EndTxn--> Ready
                                                  |    \\--abort--> AbortingTransaction --EndTxn--> Ready
                                                  v                      ^
                                            AbortableError --abort-------/
    (any) --fatal error or close--> FatalError

Every change of state goes through :meth:`TransactionManager.transition_to`, which
checks :data:`VALID_PREVIOUS` (Kafka's ``State.isTransitionValid``) and raises
:class:`~exactly.app.client.types.IllegalStateError` for any other move. Two moves go beyond
Kafka's table, because our producer lets a failed EndTxn be tried again:
CommittingTransaction -> InTransaction (a failed commit, commit or abort it again) and
AbortingTransaction -> AbortableError (a failed abort, abort it again).

With transaction version 2 (KIP-890 part 2, the broker's finalized
``transaction.version``: ``transaction_version``), as Kafka 4's client: a partition joins
the transaction with its first batch (Produce with ``add_to_transaction``), a group with
its TxnOffsetCommit, and EndTxn answers the bumped epoch the next transaction uses.

Not thread-safe: the producer's lock guards it (the producer and its sender share it).
"""

from __future__ import annotations

import enum
from typing import Callable

from exactly.app.client.record_accumulator import TopicPartition
from exactly.app.client.types import IllegalStateError
from exactly.storage.errors import (
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
)
from exactly.storage.record_batch import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID

#: errors after which the producer is unusable (the seed's fatal transactional errors)
FATAL_ERRORS = (ProducerFencedError, InvalidProducerEpochError, InvalidTransactionTimeoutError,
                TransactionalIdAuthorizationFailedError)


class State(enum.Enum):
    """A transactional producer's state (Kafka's ``TransactionManager.State``); an
    idempotent producer uses Uninitialized, Ready and FatalError only."""

    #: created; init_transactions (or, idempotent, the first send) not done yet
    UNINITIALIZED = "Uninitialized"
    #: has a producer id and epoch; no transaction open (init_transactions, EndTxn done)
    READY = "Ready"
    #: begin_transaction was called: records and offsets may be sent
    IN_TRANSACTION = "InTransaction"
    #: commit_transaction: flushing, then EndTxn(commit)
    COMMITTING_TRANSACTION = "CommittingTransaction"
    #: abort_transaction: failing what waits, then EndTxn(abort)
    ABORTING_TRANSACTION = "AbortingTransaction"
    #: a record or offset of the transaction failed: only abort_transaction goes on
    ABORTABLE_ERROR = "AbortableError"
    #: fenced, refused for good, or closed: every later call raises the error
    FATAL_ERROR = "FatalError"


S = State
#: the states each state may be entered from (Kafka's ``isTransitionValid``, plus the two
#: retry moves the module docstring names)
VALID_PREVIOUS: dict[State, frozenset[State]] = {
    S.UNINITIALIZED: frozenset(),
    S.READY: frozenset({S.UNINITIALIZED, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY, S.COMMITTING_TRANSACTION}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.FATAL_ERROR: frozenset(State),
}
#: states in which a transactional producer's batches may go out
SENDING = frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION})


class TransactionManager:
    """Producer id, epoch and transaction state of one producer (guarded by its lock)."""

    def __init__(self, transactional_id: str | None, idempotent: bool,
                 on_error: Callable[[], None] = lambda: None) -> None:
        self.transactional_id = transactional_id
        self.idempotent = idempotent
        #: called when the producer becomes failed or abortable (the sender fails what waits)
        self._on_error = on_error
        self.producer_id, self.producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        self.state = S.UNINITIALIZED
        self.error: BaseException | None = None
        # partitions added to the coordinator's transaction, partitions waiting for the
        # sender to add them, whether it is adding some now; groups whose offsets it holds
        self.txn_partitions: set[TopicPartition] = set()
        self.partitions_to_add: set[TopicPartition] = set()
        self.adding = False
        self.txn_groups: set[str] = set()
        #: KIP-360: an idempotent producer bumps its epoch once nothing is in flight; a
        #: transactional one after its abort
        self.bump_required = False
        #: the transaction version in use (2: KIP-890 part 2), set at init_transactions
        self.transaction_version = 0

    @property
    def implicit_adds(self) -> bool:
        """Transaction version 2: the broker adds partitions and groups itself."""
        return self.transaction_version >= 2

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    def transition_to(self, target: State, error: BaseException | None = None) -> None:
        """The one way the state changes: refused (IllegalStateError) unless the table allows it."""
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateError(f"transactional id {self.transactional_id!r}: invalid transition "
                                    f"from {self.state.value} to {target.value}")
        self.state = target
        if error is not None or target in (S.READY, S.FATAL_ERROR):
            self.error = error

    # -- producer id and epoch -----------------------------------------------------------

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def set_producer_id_and_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """A producer id and epoch from InitProducerId or a bump: sequences start again."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.bump_required = False

    def bump_idempotent_epoch(self) -> bool:
        """Kafka's ``bumpIdempotentProducerEpoch``: the next epoch, True; False when the
        epoch is Short.MAX_VALUE and a new producer id is needed instead."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            return False
        self.set_producer_id_and_epoch(self.producer_id, self.producer_epoch + 1)
        return True

    # -- errors ----------------------------------------------------------------------------

    def fail(self, error: KafkaError) -> KafkaError:
        """Record an error of a send or of the transaction; returns the error to report
        (ProducerFenced for a stale epoch)."""
        if isinstance(error, FATAL_ERRORS):
            return self.set_fatal(error)
        if self.transactional and self.state in SENDING:
            self.transition_to(S.ABORTABLE_ERROR, error)
            self._on_error()
        return error

    def set_fatal(self, error: KafkaError) -> KafkaError:
        """The producer is unusable from now on; returns the error every later call raises."""
        if self.state is not S.FATAL_ERROR:
            self.transition_to(S.FATAL_ERROR, _as_fenced(error))
            self._on_error()
        return self.error if isinstance(self.error, KafkaError) else error

    def check_not_fatal(self) -> None:
        if self.state is S.FATAL_ERROR:
            raise self.error if self.error is not None else IllegalStateError("the producer failed")

    def raise_if_abortable(self) -> None:
        if self.state is S.ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"the transaction failed ({self.error}); abort it before going on") from self.error

    def require(self, state: State, action: str) -> None:
        if self.state is not state:
            raise IllegalStateError(f"cannot {action} in state {self.state.value}")

    def check_can_send(self) -> None:
        if self.state is S.IN_TRANSACTION:
            return
        self.check_not_fatal()
        if self.transactional:
            self.raise_if_abortable()
            self.require(S.IN_TRANSACTION, "send")

    # -- the transaction's partitions and groups ---------------------------------------------

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether the partition's batches may go out now."""
        if self.transactional:
            return self.state in SENDING and tp in self.txn_partitions
        if self.state is S.FATAL_ERROR or self.bump_required:
            return False
        return self.has_producer_id or not self.idempotent

    def may_retry(self) -> bool:
        """Whether a batch the broker refused may be sent again in this state."""
        return self.state in (SENDING if self.transactional else (S.UNINITIALIZED, S.READY))

    def maybe_add_partition(self, tp: TopicPartition) -> bool:
        """A send of the transaction went to ``tp``: True if it must be added (AddPartitionsToTxn)."""
        if not self.transactional or tp in self.txn_partitions or tp in self.partitions_to_add:
            return False
        if self.implicit_adds:  # its first batch adds it
            self.txn_partitions.add(tp)
            return False
        self.partitions_to_add.add(tp)
        return True

    def start_adding(self) -> list[TopicPartition] | None:
        """The partitions to add now, or None (nothing to add, or an add in progress)."""
        if self.adding or not self.partitions_to_add or self.state not in SENDING:
            return None
        self.adding = True
        return sorted(self.partitions_to_add)

    def added(self, partitions: list[TopicPartition], error: KafkaError | None) -> None:
        """AddPartitionsToTxn answered: the partitions are in the transaction, or it failed."""
        self.adding = False
        if error is None:
            self.txn_partitions.update(partitions)
            self.partitions_to_add.difference_update(partitions)
        else:
            self.fail(error)

    @property
    def has_transaction_data(self) -> bool:
        """Whether the coordinator knows of partitions or groups in the transaction (else
        EndTxn is not needed)."""
        return bool(self.txn_partitions or self.txn_groups)

    def transaction_ended(self) -> None:
        """EndTxn done (or not needed): Ready, with nothing in the transaction."""
        self.txn_partitions.clear()
        self.partitions_to_add.clear()
        self.txn_groups.clear()
        self.transition_to(S.READY)


def _as_fenced(error: KafkaError) -> KafkaError:
    """The seed: a stale epoch means another instance is alive -- ProducerFenced."""
    if isinstance(error, InvalidProducerEpochError):
        fenced = ProducerFencedError(str(error))
        fenced.__cause__ = error
        return fenced
    return error
