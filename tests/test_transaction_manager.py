"""The embedded producer's TransactionManager against its transition table and Kafka's
client ``TransactionManager``: every change of state goes through one checked
function, random sequences of calls never make a move the table forbids, a forbidden
move raises IllegalStateError and changes nothing, and the idempotent epoch bump asks
for a new producer id at Short.MAX_VALUE, as Kafka's ``bumpIdempotentProducerEpoch``.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from exactly.app.client.transaction_manager import SENDING, VALID_PREVIOUS, State, TransactionManager
from exactly.app.client.types import IllegalStateError
from exactly.storage.errors import (
    InvalidProducerEpochError,
    KafkaError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RequestTimedOutError,
)
from exactly.storage.record_batch import MAX_PRODUCER_EPOCH

pytestmark = pytest.mark.timeout(120)

S = State
#: Kafka's ``TransactionManager.State.isTransitionValid``, written out independently of
#: the code (INITIALIZING left out: our InitProducerId happens inside Uninitialized)
KAFKA_PREVIOUS = {
    S.UNINITIALIZED: set(),
    S.READY: {S.UNINITIALIZED, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION},
    S.ABORTING_TRANSACTION: {S.IN_TRANSACTION, S.ABORTABLE_ERROR},
    S.ABORTABLE_ERROR: {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION},
    S.FATAL_ERROR: set(State),
}
#: ours beyond Kafka's: a failed EndTxn may be tried again (the module docstring)
RETRY_MOVES = {(S.COMMITTING_TRANSACTION, S.IN_TRANSACTION), (S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR)}

ERRORS = st.sampled_from([RequestTimedOutError("late"), OutOfOrderSequenceNumberError("gap"),
                          ProducerFencedError("fenced"), InvalidProducerEpochError("stale")])


def test_the_table_is_kafkas_plus_the_two_retry_moves():
    ours = {(before, after) for after, befores in VALID_PREVIOUS.items() for before in befores}
    kafka = {(before, after) for after, befores in KAFKA_PREVIOUS.items() for before in befores}
    assert ours - kafka == RETRY_MOVES and kafka <= ours
    assert set(VALID_PREVIOUS) == set(State)


def test_a_forbidden_transition_raises_illegal_state_and_changes_nothing():
    manager = TransactionManager("t", idempotent=True)
    with pytest.raises(IllegalStateError, match="invalid transition from Uninitialized to InTransaction"):
        manager.transition_to(S.IN_TRANSACTION)
    assert manager.state is S.UNINITIALIZED


def test_the_idempotent_bump_asks_for_a_new_producer_id_at_short_max_value():
    """Kafka's bumpIdempotentProducerEpoch: epoch + 1 up to Short.MAX_VALUE, then a
    new producer id (the sender's InitProducerId) instead of an epoch beyond int16."""
    manager = TransactionManager(None, idempotent=True)
    manager.set_producer_id_and_epoch(7, MAX_PRODUCER_EPOCH - 1)
    manager.bump_required = True
    assert manager.bump_idempotent_epoch() is True
    assert (manager.producer_id, manager.producer_epoch, manager.bump_required) == (7, MAX_PRODUCER_EPOCH, False)
    manager.bump_required = True
    assert manager.bump_idempotent_epoch() is False
    assert (manager.producer_id, manager.producer_epoch, manager.bump_required) == (7, MAX_PRODUCER_EPOCH, True)


class TransactionManagerMachine(RuleBasedStateMachine):
    """Drive the manager with every call the producer and its sender make, plus raw
    transitions to any state; after each, the move made (if any) is one the table allows."""

    def __init__(self) -> None:
        super().__init__()
        self.woken = 0
        self.manager = TransactionManager("t", idempotent=True, on_error=self._wake)
        self.before = self.manager.state

    def _wake(self) -> None:
        self.woken += 1

    def _expect(self, call, allowed: bool) -> None:
        """Run ``call``: it succeeds when allowed, else raises IllegalStateError with no change."""
        state, error = self.manager.state, self.manager.error
        if allowed:
            call()
            return
        with pytest.raises(IllegalStateError, match=f"invalid transition from {state.value}"):
            call()
        assert (self.manager.state, self.manager.error) == (state, error)

    @rule(goal=st.sampled_from(State))
    def transition(self, goal: State) -> None:
        self._expect(lambda: self.manager.transition_to(goal), self.manager.state in VALID_PREVIOUS[goal])

    @rule(error=ERRORS)
    def fail(self, error: KafkaError) -> None:
        """A record or a request failed: fatal errors make the producer fatal from any
        state, other errors make a sending transaction abortable and leave others alone."""
        state, earlier, woken = self.manager.state, self.manager.error, self.woken
        reported = self.manager.fail(error)
        if state is S.FATAL_ERROR:  # fatal stays fatal, with its first error
            assert (self.manager.state, self.manager.error, self.woken) == (state, earlier, woken)
        elif isinstance(error, (ProducerFencedError, InvalidProducerEpochError)):
            assert self.manager.state is S.FATAL_ERROR and self.woken == woken + 1
            assert self.manager.error is reported and isinstance(reported, ProducerFencedError)
        elif state in SENDING:
            assert (self.manager.state, self.manager.error, self.woken) == (S.ABORTABLE_ERROR, error, woken + 1)
        else:
            assert (self.manager.state, reported) == (state, error)

    @rule()
    def transaction_ended(self) -> None:
        self._expect(self.manager.transaction_ended, self.manager.state in VALID_PREVIOUS[S.READY])

    @rule()
    def check_can_send(self) -> None:
        """Sends are refused (with the documented error) outside a transaction."""
        if self.manager.state is S.IN_TRANSACTION:
            self.manager.check_can_send()
            return
        with pytest.raises((IllegalStateError, KafkaError)):
            self.manager.check_can_send()

    @invariant()
    def every_move_is_in_the_table(self) -> None:
        after = self.manager.state
        assert after is self.before or self.before in VALID_PREVIOUS[after], (self.before, after)
        self.before = after

    @invariant()
    def ready_has_no_error(self) -> None:
        assert self.manager.state is not S.READY or self.manager.error is None


TransactionManagerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
test_transaction_manager_follows_its_table = TransactionManagerMachine.TestCase
