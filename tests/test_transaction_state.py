"""The transaction state machine of one transactional id, against VALID_PREVIOUS.

Every (from, to) pair of the eight states is tried: an allowed one succeeds through
the ``prepare_*`` that targets it and leaves the state alone until
``complete_transition``; a forbidden one is refused. ``complete_transition``
re-checks its invariants and refuses without changing anything. A state machine
drives random prepare/complete/abort sequences against an independent copy of
the table, and the docs table in exactly/coordinator/transaction_coordinator.py is pinned
to the code.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import exactly.coordinator.transaction_coordinator as transaction_coordinator
from exactly.coordinator.transaction_state import (
    VALID_PREVIOUS,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from exactly.storage.errors import ConcurrentTransactionsError, InvariantViolation, KafkaError
from exactly.storage.record_batch import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, ControlType, is_epoch_exhausted

S = TransactionState
TP = ("orders", 0)
NOW = 1_000_000

#: the table as the seed and Kafka's TransactionState define it, written out
#: independently of the code so that a change to VALID_PREVIOUS shows up here
MODEL: dict[S, set[S]] = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    # Kafka 4's: transaction version 2 aborts with no partition added (EndTxn v5)
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def metadata(state: S, epoch: int = 5, partitions: set | None = None) -> TransactionMetadata:
    """An id as the coordinator loads it from the log: in ``state``, nothing pending."""
    if partitions is None:
        partitions = {TP} if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                       S.PREPARE_EPOCH_FENCE) else set()
    start = NOW - 10 if partitions else -1
    return TransactionMetadata("txn", 1000, -1, epoch, NO_PRODUCER_EPOCH, 60_000, state,
                               set(partitions), start, NOW - 10)


def prepare_to(meta: TransactionMetadata, target: S, now: int = NOW) -> TxnTransitMetadata:
    """The public ``prepare_*`` whose target is ``target``."""
    if target is S.EMPTY:
        return meta.prepare_increment_epoch(30_000, now)
    if target is S.ONGOING:
        return meta.prepare_add_partitions({("orders", 1)}, now)
    if target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return meta.prepare_abort_or_commit(target is S.PREPARE_COMMIT, now)
    if target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        return meta.prepare_complete(now)
    if target is S.DEAD:
        return meta.prepare_dead(now)
    if target is S.PREPARE_EPOCH_FENCE:
        return meta.prepare_fence_epoch(now)
    raise AssertionError(target)


def test_the_model_table_is_the_code_table():
    assert {state: set(previous) for state, previous in VALID_PREVIOUS.items()} == MODEL


ALL_PAIRS = [(a, b) for a in S for b in S]


@pytest.mark.parametrize(("source", "target"), ALL_PAIRS, ids=[f"{a.display}->{b.display}" for a, b in ALL_PAIRS])
def test_every_transition_is_allowed_exactly_when_the_table_says_so(source, target):
    meta = metadata(source)
    before = meta.snapshot()
    # the single transition function every prepare_* goes through (the table check)
    if source in MODEL[target]:
        transit = meta._prepare(target)
        assert transit.state is target and meta.pending_state is target
        meta.abort_transition()
        # ...and the public prepare that targets this state
        transit = prepare_to(meta, target)
        assert transit.state is target
        assert meta.pending_state is target
        assert meta.snapshot() == before  # nothing moves before the log write
        meta.complete_transition(transit)
        assert meta.state is target and meta.pending_state is None
    else:
        with pytest.raises(IllegalTransitionError) as raised:
            meta._prepare(target)
        # a bug, not a client's mistake: no Kafka error a client could be sent (409)
        assert isinstance(raised.value, InvariantViolation) and not isinstance(raised.value, KafkaError)
        assert meta.pending_state is None and meta.snapshot() == before
        complete_target = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT}.get(source, S.COMPLETE_ABORT)
        if target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and complete_target is not target:
            # prepare_complete cannot even name this target from ``source``
            return
        with pytest.raises(IllegalTransitionError):
            prepare_to(meta, target)
        assert meta.pending_state is None and meta.snapshot() == before


def test_allowed_transitions_give_transits_with_the_right_contents():
    ongoing = metadata(S.EMPTY)
    transit = ongoing.prepare_add_partitions({TP}, NOW)
    assert transit.partitions == {TP} and transit.txn_start_timestamp == NOW
    ongoing.complete_transition(transit)
    more = ongoing.prepare_add_partitions({("orders", 1)}, NOW + 5)
    assert more.partitions == {TP, ("orders", 1)} and more.txn_start_timestamp == NOW  # timer kept
    ongoing.complete_transition(more)
    prepare = ongoing.prepare_abort_or_commit(True, NOW + 6)
    assert prepare.partitions == {TP, ("orders", 1)} and prepare.producer_epoch == 5
    ongoing.complete_transition(prepare)
    complete = ongoing.prepare_complete(NOW + 7)
    assert complete.state is S.COMPLETE_COMMIT and complete.partitions == frozenset()
    ongoing.complete_transition(complete)
    bump = ongoing.prepare_increment_epoch(1234, NOW + 8)
    assert (bump.producer_epoch, bump.txn_timeout_ms, bump.txn_start_timestamp) == (6, 1234, -1)


@pytest.mark.parametrize("pending", [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD])
def test_a_second_prepare_while_one_is_pending_is_concurrent_transactions(pending):
    source = {S.EMPTY: S.COMPLETE_ABORT, S.ONGOING: S.EMPTY, S.PREPARE_ABORT: S.ONGOING,
              S.DEAD: S.EMPTY}[pending]
    meta = metadata(source)
    prepare_to(meta, pending)
    before = meta.snapshot()
    for target in S:
        with pytest.raises(ConcurrentTransactionsError) as raised:
            prepare_to(meta, target)
        assert (raised.value.code, raised.value.name) == (51, "CONCURRENT_TRANSACTIONS")
        assert meta.pending_state is pending and meta.snapshot() == before
    meta.abort_transition()
    assert meta.pending_state is None and meta.state is source
    prepare_to(meta, pending)  # free again


def refused(meta: TransactionMetadata, transit: TxnTransitMetadata) -> None:
    before = meta.snapshot()
    pending = meta.pending_state
    with pytest.raises(IllegalTransitionError):
        meta.complete_transition(transit)
    assert meta.snapshot() == before and meta.pending_state is pending


def test_complete_refuses_an_epoch_jump_of_two():
    meta = metadata(S.COMPLETE_COMMIT, epoch=5)
    transit = meta.prepare_increment_epoch(30_000, NOW)
    refused(meta, replace(transit, producer_epoch=7))
    meta.complete_transition(transit)
    assert meta.producer_epoch == 6


def test_complete_refuses_an_epoch_going_back():
    meta = metadata(S.COMPLETE_COMMIT, epoch=5)
    transit = meta.prepare_increment_epoch(30_000, NOW)
    refused(meta, replace(transit, producer_epoch=4))


def test_complete_allows_any_epoch_for_a_new_producer_id():
    meta = metadata(S.COMPLETE_ABORT, epoch=MAX_PRODUCER_EPOCH - 1)
    transit = meta.prepare_new_producer_id(2000, 30_000, NOW)
    meta.complete_transition(transit)
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (2000, 0, 1000)


def test_complete_refuses_partitions_shrinking_while_ongoing():
    meta = metadata(S.ONGOING, partitions={TP, ("orders", 1)})
    transit = meta.prepare_add_partitions({("orders", 2)}, NOW)
    refused(meta, replace(transit, partitions=frozenset({("orders", 2)})))
    meta.complete_transition(transit)
    assert meta.partitions == {TP, ("orders", 1), ("orders", 2)}


def test_complete_refuses_time_going_back():
    meta = metadata(S.ONGOING)
    transit = meta.prepare_abort_or_commit(True, NOW)
    refused(meta, replace(transit, txn_last_update_timestamp=NOW - 11))
    meta.complete_transition(transit)
    assert meta.state is S.PREPARE_COMMIT


def test_complete_refuses_a_transit_other_than_the_pending_one():
    meta = metadata(S.ONGOING)
    transit = meta.prepare_abort_or_commit(True, NOW)
    refused(meta, replace(transit, state=S.PREPARE_ABORT))
    fresh = metadata(S.ONGOING)
    refused(fresh, transit)  # nothing pending at all


def test_abort_transition_keeps_the_state():
    meta = metadata(S.ONGOING)
    before = meta.snapshot()
    meta.prepare_abort_or_commit(False, NOW)
    meta.abort_transition()
    assert meta.snapshot() == before and meta.pending_state is None


def test_the_epoch_is_exhausted_one_below_short_max_value_as_kafkas():
    """Kafka's ``isEpochExhausted``: epoch >= Short.MAX_VALUE - 1, the last one kept for
    the fencing bump at timeout or re-initialisation."""
    assert MAX_PRODUCER_EPOCH == 2**15 - 1
    assert [is_epoch_exhausted(e) for e in (0, 32765, 32766, 32767)] == [False, False, True, True]


def test_fencing_always_bumps_the_epoch_and_forgets_the_last_one():
    """Kafka's prepareFenceProducerEpoch: +1 even at the last usable epoch (the
    markers must carry an epoch the zombie does not have), and no last epoch, so
    the fenced producer cannot bump its way back."""
    for epoch in (0, 7, MAX_PRODUCER_EPOCH - 1):
        meta = metadata(S.ONGOING, epoch=epoch)
        transit = meta.prepare_fence_epoch(NOW)
        assert transit.producer_epoch == epoch + 1 <= MAX_PRODUCER_EPOCH == 32767
        assert transit.last_producer_epoch == NO_PRODUCER_EPOCH


def test_only_a_kip360_bump_remembers_the_previous_epoch():
    meta = metadata(S.EMPTY, epoch=5)
    assert meta.prepare_increment_epoch(30_000, NOW).last_producer_epoch == NO_PRODUCER_EPOCH
    meta.abort_transition()
    assert meta.prepare_increment_epoch(30_000, NOW, remember_last_epoch=True).last_producer_epoch == 5
    meta.abort_transition()
    assert meta.prepare_new_producer_id(9, 30_000, NOW).last_producer_epoch == NO_PRODUCER_EPOCH
    meta.abort_transition()
    assert meta.prepare_new_producer_id(9, 30_000, NOW, remember_last_epoch=True).last_producer_epoch == 5


# -- random sequences against the model -------------------------------------------------

PREPARES = ["increment_epoch", "new_producer_id", "add_partitions", "commit", "abort",
            "complete", "dead", "fence", "commit_v2", "abort_v2"]


def model_target(state: S, prepare: str) -> S:
    return {"increment_epoch": S.EMPTY, "new_producer_id": S.EMPTY, "add_partitions": S.ONGOING,
            "commit": S.PREPARE_COMMIT, "abort": S.PREPARE_ABORT,
            "commit_v2": S.PREPARE_COMMIT, "abort_v2": S.PREPARE_ABORT,
            "complete": S.COMPLETE_COMMIT if state is S.PREPARE_COMMIT else S.COMPLETE_ABORT,
            "dead": S.DEAD, "fence": S.PREPARE_EPOCH_FENCE}[prepare]


class TransitionMachine(RuleBasedStateMachine):
    """Random prepare / complete / abort_transition sequences on one id; the state
    changes only on complete, and only along the model table."""

    def __init__(self) -> None:
        super().__init__()
        self.meta = TransactionMetadata("txn", 1000, -1, 0, NO_PRODUCER_EPOCH, 60_000, S.EMPTY,
                                        set(), -1, NOW)
        self.state = S.EMPTY
        self.transit: TxnTransitMetadata | None = None
        self.now = NOW
        self.next_pid = 2000

    @rule(prepare=st.sampled_from(PREPARES), partition=st.integers(0, 3), tick=st.integers(0, 5))
    def prepare(self, prepare: str, partition: int, tick: int) -> None:
        self.now += tick
        before = self.meta.snapshot()
        target = model_target(self.state, prepare)
        calls = {
            "increment_epoch": lambda: self.meta.prepare_increment_epoch(30_000, self.now),
            "new_producer_id": lambda: self.meta.prepare_new_producer_id(self.next_pid, 30_000, self.now),
            "add_partitions": lambda: self.meta.prepare_add_partitions({("t", partition)}, self.now),
            "commit": lambda: self.meta.prepare_abort_or_commit(True, self.now),
            "abort": lambda: self.meta.prepare_abort_or_commit(False, self.now),
            "complete": lambda: self.meta.prepare_complete(self.now),
            "dead": lambda: self.meta.prepare_dead(self.now),
            "fence": lambda: self.meta.prepare_fence_epoch(self.now),
            # transaction version 2 (EndTxn v5): the epoch bumped at the decision
            "commit_v2": lambda: self.meta.prepare_abort_or_commit(True, self.now, transaction_version=2),
            "abort_v2": lambda: self.meta.prepare_abort_or_commit(False, self.now, transaction_version=2),
        }
        if self.transit is not None:
            with pytest.raises(ConcurrentTransactionsError):
                calls[prepare]()
        elif self.state not in MODEL[target]:
            with pytest.raises(IllegalTransitionError):
                calls[prepare]()
        else:
            self.transit = calls[prepare]()
            assert self.transit.state is target and self.meta.pending_state is target
            if prepare.endswith("_v2"):
                assert self.transit.producer_epoch == before.producer_epoch + 1
                assert self.transit.client_transaction_version == 2
            if prepare == "new_producer_id":
                self.next_pid += 1
        assert self.meta.snapshot() == before  # a prepare never moves the state

    @precondition(lambda self: self.transit is not None)
    @rule()
    def complete(self) -> None:
        before = self.meta.snapshot()
        self.meta.complete_transition(self.transit)
        self.state = self.transit.state
        assert self.meta.snapshot() == self.transit
        assert before.producer_epoch <= self.meta.producer_epoch or before.producer_id != self.meta.producer_id
        if self.state is S.ONGOING and before.state is S.ONGOING:
            assert before.partitions <= self.meta.partitions
        self.transit = None

    @precondition(lambda self: self.transit is not None)
    @rule()
    def abort_transition(self) -> None:
        before = self.meta.snapshot()
        self.meta.abort_transition()
        self.transit = None
        assert self.meta.snapshot() == before

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.meta.state is self.state
        assert self.meta.pending_state is (self.transit.state if self.transit else None)
        if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert not self.meta.partitions


TransitionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_random_transition_sequences_follow_the_table = TransitionMachine.TestCase


# -- docs pinned to code ---------------------------------------------------------------

def docs_table() -> dict[str, set[str]]:
    """The ``state <- entered from : by`` table of the coordinator's module docstring."""
    doc = transaction_coordinator.__doc__
    rows = re.findall(r"^ {4}(\w+) +<- ([A-Za-z]+(?:, [A-Za-z]+)*)", doc, re.MULTILINE)
    assert rows and rows[0][0] == "state", "the table header moved"
    return {state: set(previous.split(", ")) for state, previous in rows[1:]}


def test_every_state_is_in_the_table_and_in_the_docs():
    assert set(VALID_PREVIOUS) == set(S)
    table = docs_table()
    assert set(table) == {s.display for s in S}
    for state in S:
        assert table[state.display] == {p.display for p in VALID_PREVIOUS[state]}, state.display


#: each state's flags, written out independently of the code; expiration as Kafka's
#: TransactionState.expirationAllowed (Empty, CompleteCommit, CompleteAbort)
FLAGS: dict[S, tuple[bool, bool, bool, bool, bool, ControlType | None]] = {
    #                       open   ending prepared complete expires outcome
    S.EMPTY:               (False, False, False,   False,   True,   None),
    S.ONGOING:             (True,  False, False,   False,   False,  None),
    S.PREPARE_COMMIT:      (True,  True,  True,    False,   False,  ControlType.COMMIT),
    S.PREPARE_ABORT:       (True,  True,  True,    False,   False,  ControlType.ABORT),
    S.COMPLETE_COMMIT:     (False, False, False,   True,    True,   ControlType.COMMIT),
    S.COMPLETE_ABORT:      (False, False, False,   True,    True,   ControlType.ABORT),
    S.DEAD:                (False, False, False,   False,   False,  None),
    S.PREPARE_EPOCH_FENCE: (True,  True,  False,   False,   False,  ControlType.ABORT),
}


def test_each_state_carries_its_flags():
    assert {s: (s.is_open, s.is_ending, s.is_prepared, s.is_complete, s.expiration_allowed, s.outcome)
            for s in S} == FLAGS


def test_the_flags_agree_with_the_transition_table():
    assert {s for s in S if s.expiration_allowed} == VALID_PREVIOUS[S.DEAD], "only an idle id expires"
    for complete in (s for s in S if s.is_complete):
        (prepared,) = VALID_PREVIOUS[complete]
        assert prepared.is_prepared and prepared.outcome is complete.outcome
    assert {s for s in S if s.is_prepared} == {p for s in S if s.is_complete for p in VALID_PREVIOUS[s]}
    for state, previous in VALID_PREVIOUS.items():
        if any(p.is_open for p in previous):
            assert state.is_open or state.is_complete, f"{state.display}: an open transaction only ends complete"


def test_persisted_state_ids_are_kafkas():
    """The TxnStatus byte of the transaction log (Kafka's TransactionState ids)."""
    assert {s.display: s.id for s in S} == {
        "Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4,
        "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7}
    for state in S:
        assert S.from_id(state.id) is state
    with pytest.raises(ValueError):
        S.from_id(8)
