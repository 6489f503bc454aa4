"""The transaction coordinator's state machine under random clients, with transaction
version 2 (KIP-890 part 2) and version 0/1, against a real broker.

A hypothesis state machine plays one transactional id's producer: it sends batches
(version 2: the batch adds its partition; version 0/1: AddPartitionsToTxn first),
commits or aborts (EndTxn v5 or v3), is replaced by a new instance (InitProducerId,
which fences it), and throws in late writes -- a batch under an identity an earlier
transaction had, which must never be appended. After every step the read_committed
view of each partition is exactly what the model committed, in order, and every
epoch the client is given is above every epoch it had.
"""

from __future__ import annotations

from pathlib import Path
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from exactly.app import Broker
from exactly.storage.clock import FakeClock
from exactly.storage.errors import KafkaError
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.conftest import SMALL_INTERNAL_TOPICS

T = "props"
PARTITIONS = 2
TXN_ID = "props-txn"


class CoordinatorMachine(RuleBasedStateMachine):
    """One transactional id's life, both protocol versions, late writes included."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.broker: Broker | None = None

    @initialize(version=st.sampled_from([2, 1]))
    def start(self, version: int) -> None:
        self.version = version
        self.broker = Broker(Path(self.dir.name) / "data", clock=FakeClock(), **SMALL_INTERNAL_TOPICS,
                             **{"transaction.version": version})
        self.broker.create_topic(T, partitions=PARTITIONS)
        self.tc = self.broker.engine.transactions.coordinator
        self.pid, self.epoch = self.call("init_producer_id", TXN_ID, 60_000)
        self.committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.pending: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.added: set[int] = set()
        self.sequences: dict[tuple[int, int, int], int] = {}
        #: identities of earlier transactions that must never write again
        self.stale: set[tuple[int, int]] = set()
        self.highest_epoch = {self.pid: self.epoch}
        self.counter = 0

    def teardown(self) -> None:
        if self.broker is not None:
            self.broker.close()
        self.dir.cleanup()

    def call(self, request: str, *args):
        return self.broker.engine.call(getattr(self.tc, request), *args)

    def append(self, partition: int, pid: int, epoch: int, value: bytes) -> None:
        key = (pid, epoch, partition)
        batch = encode_batch([SimpleRecord(value)], producer_id=pid, producer_epoch=epoch,
                             base_sequence=self.sequences.get(key, 0), transactional=True)
        self.broker.engine.submit(self.broker.engine.partitions.start_produce, T, partition, batch, -1, TXN_ID,
                                  None, self.version >= 2).result(10)
        self.sequences[key] = self.sequences.get(key, 0) + 1

    def given(self, pid: int, epoch: int) -> None:
        """The client holds a new identity: never one it had before, never a lower epoch."""
        assert (pid, epoch) not in self.stale
        assert epoch > self.highest_epoch.get(pid, -1) or (pid, epoch) == (self.pid, self.epoch)
        self.highest_epoch[pid] = max(epoch, self.highest_epoch.get(pid, -1))
        self.pid, self.epoch = pid, epoch

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def send(self, partition: int) -> None:
        if self.version < 2 and partition not in self.added:
            errors = self.call("add_partitions", TXN_ID, self.pid, self.epoch, [(T, partition)])
            assert errors == {(T, partition): None}
        self.added.add(partition)
        self.counter += 1
        value = b"v%d" % self.counter
        self.append(partition, self.pid, self.epoch, value)
        self.pending[partition].append(value)

    @rule(commit=st.booleans())
    def end(self, commit: bool) -> None:
        if not self.added and (self.version < 2 or commit):
            return  # nothing to end: a client sends no EndTxn (version 2 may abort to fence, below)
        old = (self.pid, self.epoch)
        answered = self.call("end_txn", TXN_ID, self.pid, self.epoch, commit, 2 if self.version >= 2 else 0)
        if commit:
            for p, values in self.pending.items():
                self.committed[p] += values
        self.pending = {p: [] for p in range(PARTITIONS)}
        self.added = set()
        if self.version >= 2:
            assert answered == (old[0], old[1] + 1)
            self.stale.add(old)
            self.given(*answered)
        else:
            assert answered == old

    @rule()
    def new_instance(self) -> None:
        """InitProducerId of a new instance: the open transaction is aborted, the old one fenced."""
        self.stale.add((self.pid, self.epoch))
        pid, epoch = self.call("init_producer_id", TXN_ID, 60_000)
        self.pending = {p: [] for p in range(PARTITIONS)}
        self.added = set()
        self.given(pid, epoch)

    @precondition(lambda self: bool(self.stale))
    @rule(partition=st.integers(0, PARTITIONS - 1), data=st.data())
    def late_write(self, partition: int, data: st.DataObject) -> None:
        pid, epoch = data.draw(st.sampled_from(sorted(self.stale)))
        end = self.broker.list_offsets(T, partition, -1)
        try:
            self.append(partition, pid, epoch, b"late")
        except KafkaError:
            pass
        else:
            raise AssertionError(f"a late write of producer {pid} epoch {epoch} was appended")
        assert self.broker.list_offsets(T, partition, -1) == end

    @invariant()
    def read_committed_is_what_was_committed(self) -> None:
        if self.broker is None:
            return
        for partition in range(PARTITIONS):
            r = self.broker.fetch(T, partition, 0, isolation_level="read_committed")
            values = [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions or ()).records]
            assert values == self.committed[partition], (partition, values, self.committed[partition])


CoordinatorMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
test_random_clients_of_both_versions_keep_exactly_once = CoordinatorMachine.TestCase
