"""The transaction coordinator killed at every step of a transaction's life.

A child process (tests/txn_crash_child.py) runs a consume-transform-produce
application -- a read_committed group consumer on ``in``, a transactional producer
writing to ``out-a`` and ``out-b``, the consumer's offsets sent to the transaction --
and SIGKILLs itself right after one chosen coordinator write is durable (see its
``SCENARIOS``); two scenarios then reopen the directory and kill the roll-forward
too. Before dying the child says in a side file what the coordinator had decided.
The test then reopens the data directory, as the restarted broker, and checks the
seed's promises (Transaction Coordinator Startup; Discussion on Coordinator Failure
During Transaction Completion):

* a transaction whose PREPARE_COMMIT is durable is committed -- its output visible
  to read_committed in every output partition, its offsets committed -- without
  anyone retrying, because the restarted coordinator rolls it forward; one whose
  PREPARE_ABORT is durable is aborted the same way; one never prepared stays
  invisible and is aborted once a new producer instance calls init_transactions
  or the transaction times out;
* a client retrying EndTxn after the crash with the decided command gets OK once
  the outcome is complete, and the other command INVALID_TXN_STATE; it then carries
  on with the same producer id, epoch and sequences. A client whose epoch the
  recovery bumped is fenced;
* read_committed never shows aborted data (which is in the log: the checks are
  not vacuous), and the committed offsets agree exactly with the committed output:
  every input below them has its output once, nothing above them has any;
* the coordinator settles in Complete*/Empty, never stuck in Prepare*, and every
  output partition's LSO reaches its high watermark;
* the application restarted on top of it processes the rest of the input, and the
  end result -- every input exactly once -- survives one more restart.

Every scenario runs with transaction version 2 (KIP-890 part 2, the default: the
client's EndTxn bumps the epoch, so the settled epoch is one higher and the retried
EndTxn names the epoch before the bump) and with version 1 (``transaction.version=1``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.client.partitioner import murmur2
from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.transaction_state import TransactionState, TxnTransitMetadata
from exactly.storage.errors import InvalidTxnStateError, ProducerFencedError, UnstableOffsetCommitError
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.txn_crash_child import (
    CONFIG,
    GROUP,
    INPUT,
    INPUT_PARTITIONS,
    OUTPUT_PARTITIONS,
    OUTPUTS,
    RECORDS_PER_PARTITION,
    SCENARIOS,
    TARGET_TXN,
    TXN_ID,
    TXN_SIZE,
    input_key,
    parse_output,
    prepare,
    run_to_end,
)
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
#: how long a child may take to start, run two transactions and kill itself
CHILD_DEADLINE_S = 30.0
#: how long the restarted coordinator may take to roll a transaction forward
SETTLE_DEADLINE_S = 10.0

S = TransactionState
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Expected:
    """What the restarted broker must make of a scenario.

    ``decided``: what the child's coordinator had decided for the target transaction
    before it died (None: never prepared). ``settled``: the coordinator's state once
    the restart has rolled forward (and, for an open transaction, once ``recover``
    -- ``init`` by a new producer instance or ``timeout`` by the timeout job -- has
    aborted it). ``epoch_bumps``: how far the producer epoch moved from the child's
    by then.
    """

    decided: str | None
    settled: TransactionState
    epoch_bumps: int = 0
    recover: str | None = None


EXPECTED: dict[str, Expected] = {
    "prepare-commit": Expected("commit", S.COMPLETE_COMMIT),
    "commit-marker-on-output": Expected("commit", S.COMPLETE_COMMIT),
    "commit-marker-on-offsets": Expected("commit", S.COMPLETE_COMMIT),
    "complete-commit": Expected("commit", S.COMPLETE_COMMIT),
    # the fence bumps the epoch once (PrepareAbort carries it), InitProducerId once more
    "init-after-epoch-bump": Expected("abort", S.EMPTY, epoch_bumps=2),
    "init-after-fencing-prepare-abort": Expected("abort", S.COMPLETE_ABORT, epoch_bumps=1),
    "txn-offset-commit": Expected(None, S.EMPTY, epoch_bumps=2, recover="init"),
    "txn-offset-commit-then-timeout": Expected(None, S.COMPLETE_ABORT, epoch_bumps=1, recover="timeout"),
    "prepare-abort": Expected("abort", S.COMPLETE_ABORT),
    "abort-marker-on-output": Expected("abort", S.COMPLETE_ABORT),
    "init-after-fencing-complete-abort": Expected("abort", S.COMPLETE_ABORT, epoch_bumps=1),
    "roll-forward-commit-marker": Expected("commit", S.COMPLETE_COMMIT),
    "roll-forward-abort-marker": Expected("abort", S.COMPLETE_ABORT),
}
#: what the producer that outlived the broker writes when it carries on
SURVIVOR = b"survivor"


# -- the child and what it said ------------------------------------------------------------


@dataclass
class SideFile:
    """What the child wrote before it died."""

    lines: list[str]

    @classmethod
    def read(cls, path: Path) -> "SideFile":
        text = path.read_text() if path.exists() else ""
        return cls(text.splitlines())

    def after_armed(self) -> list[str]:
        armed = [i for i, line in enumerate(self.lines) if line.startswith("armed ")]
        return self.lines[armed[0] + 1:] if armed else []

    @property
    def producer(self) -> tuple[int, int]:
        """The producer id and epoch as the target transaction began."""
        _, pid, epoch = [line for line in self.lines if line.startswith("producer ")][-1].split()
        return int(pid), int(epoch)

    def txn_ranges(self, n: int) -> dict[int, range]:
        """Input partition -> the offsets transaction ``n`` took."""
        fields = next(line for line in self.lines if line.startswith(f"txn {n} ")).split()[2:]
        ranges = {}
        for field in fields:
            partition, span = field.split(":")
            first, end = span.split("-")
            ranges[int(partition)] = range(int(first), int(end))
        return ranges

    @property
    def sequences(self) -> dict[TopicPartition, int]:
        """The producer's next sequence on each output partition when it died."""
        fields = next(line for line in self.lines if line.startswith("sequences ")).split()[1:]
        return {(topic, int(partition)): int(sequence)
                for topic, partition, sequence in (field.split(":") for field in fields)}

    @property
    def decided(self) -> str | None:
        """The target transaction's outcome, once its PREPARE_* was durable."""
        decisions = [line.split()[1] for line in self.after_armed() if line.startswith("decided ")]
        assert len(decisions) <= 1, decisions
        return decisions[0] if decisions else None

    def markers_after_armed(self) -> list[str]:
        return [line for line in self.after_armed() if line.startswith("durable-marker ")]


def run_child(data_dir: Path, side_path: Path, scenario: str, version: int = 2) -> SideFile:
    """Run the child (its broker finalizing transaction ``version``) until it kills itself;
    its side file."""
    child = subprocess.Popen([sys.executable, "-m", "tests.txn_crash_child", str(data_dir),
                              str(side_path), scenario, str(version)],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            returncode = child.wait(timeout=CHILD_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the child did not reach its crash point within {CHILD_DEADLINE_S} s:\n"
                        + "\n".join(SideFile.read(side_path).lines[-10:]))
        stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
        assert returncode == -signal.SIGKILL, (
            f"the child exited with status {returncode} instead of killing itself:\n{stderr}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=CHILD_DEADLINE_S)
        if child.stderr:
            child.stderr.close()
    side = SideFile.read(side_path)
    assert side.lines and side.lines[-1] == f"crash {scenario}", side.lines[-5:]
    return side


# -- reading the restarted broker ------------------------------------------------------------


def state_of(broker: Broker) -> TxnTransitMetadata:
    """The coordinator's current state of TXN_ID (read on the engine's loop)."""
    async def describe() -> TxnTransitMetadata:
        found = broker.engine.transactions.coordinator.describe(TXN_ID)
        assert found is not None, f"the coordinator forgot {TXN_ID!r}"
        return found
    return broker.engine.call(describe)


def outputs(broker: Broker, topic: str, isolation_level: str) -> list[tuple[int, tuple[int, int]]]:
    """``(output partition, (input partition, input offset))`` of every record a
    consumer at ``isolation_level`` reads from ``topic``, in log order."""
    seen = []
    for partition in range(OUTPUT_PARTITIONS):
        offset = 0
        while True:
            result = broker.fetch(topic, partition, offset, max_bytes=4096, isolation_level=isolation_level)
            if not result.records:
                break
            read = read_records(result.records, offset, isolation_level == "read_committed",
                                result.aborted_transactions or ())
            for record in read.records:
                if record.value == SURVIVOR:
                    continue
                out_topic, in_partition, in_offset = parse_output(record.value)
                assert out_topic == topic and record.key == input_key(in_partition, in_offset), record
                seen.append((partition, (in_partition, in_offset)))
            offset = read.next_offset
    return seen


def survivors(broker: Broker, tp: TopicPartition) -> int:
    """How many records of the surviving producer a read_committed consumer sees on ``tp``."""
    result = broker.fetch(*tp, 0, isolation_level="read_committed")
    read = read_records(result.records, 0, True, result.aborted_transactions or ())
    return sum(record.value == SURVIVOR for record in read.records)


def carry_on(broker: Broker, pid: int, epoch: int, sequences: dict[TopicPartition, int], version: int) -> None:
    """The seed's client that outlived the coordinator: having had OK for its retried
    EndTxn, it goes on with the same producer id, epoch and sequences -- version 2: the
    epoch the retry answered, every sequence from 0, its partitions added by its batches."""
    tc = broker.engine.transactions.coordinator
    if version < 2:
        errors = broker.engine.call(tc.add_partitions, TXN_ID, pid, epoch, sorted(sequences))
        assert all(error is None for error in errors.values()), errors
    for tp, sequence in sorted(sequences.items()):
        broker.engine.submit(broker.engine.partitions.start_produce, *tp, encode_batch(
            [SimpleRecord(SURVIVOR, key=SURVIVOR)], producer_id=pid, producer_epoch=epoch,
            base_sequence=sequence if version < 2 else 0, transactional=True), -1, None, None,
            version >= 2).result(10)
    broker.engine.call(tc.end_txn, TXN_ID, pid, epoch, True, version)
    assert {tp: survivors(broker, tp) for tp in sequences} == {tp: 1 for tp in sequences}


def committed_offsets(broker: Broker) -> dict[int, int]:
    """The group's committed offset per input partition; none may be pending."""
    fetched = broker.engine.call(broker.engine.groups.coordinator.fetch_offsets, GROUP,
                                 [(INPUT, p) for p in range(INPUT_PARTITIONS)], True)
    assert all(f.error is None for f in fetched.values()), f"offsets still pending: {fetched}"
    return {tp[1]: f.offset for tp, f in fetched.items()}


def stable_partitions(broker: Broker) -> list[TopicPartition]:
    offsets_partition = transaction_log.partition_for(GROUP, CONFIG["offsets.topic.num.partitions"])
    return [(topic, p) for topic in OUTPUTS for p in range(OUTPUT_PARTITIONS)] + [
        (offsets_log.TOPIC, offsets_partition)]


def unstable(broker: Broker) -> list[TopicPartition]:
    """Partitions whose LSO is held below the high watermark by an open transaction."""
    return [tp for tp in stable_partitions(broker)
            if broker.list_offsets(*tp, -1, "read_committed") != broker.list_offsets(*tp, -1)]


def check_outcome(broker: Broker, committed_inputs: set[tuple[int, int]],
                  written_inputs: set[tuple[int, int]]) -> None:
    """The broker shows exactly ``committed_inputs`` processed, once each."""
    assert unstable(broker) == [], "every LSO must have reached its high watermark"
    offsets = committed_offsets(broker)
    below_offsets = {(p, o) for p, end in offsets.items() for o in range(max(end, 0))}
    assert below_offsets == committed_inputs, (
        f"committed offsets {offsets} do not match the committed transactions")
    for topic in OUTPUTS:
        visible = outputs(broker, topic, "read_committed")
        counts = Counter(inp for _, inp in visible)
        duplicates = {inp: n for inp, n in counts.items() if n > 1}
        assert not duplicates, f"{topic}: inputs with more than one committed output: {duplicates}"
        assert set(counts) == committed_inputs, (
            f"{topic}: read_committed shows {sorted(set(counts) - committed_inputs)} it must not "
            f"and misses {sorted(committed_inputs - set(counts))}")
        for partition in range(OUTPUT_PARTITIONS):
            order = [inp for out_partition, inp in visible if out_partition == partition]
            for in_partition in range(INPUT_PARTITIONS):
                offsets_in_order = [o for p, o in order if p == in_partition]
                assert offsets_in_order == sorted(offsets_in_order), (
                    f"{topic}-{partition}: input partition {in_partition} out of order")
        everything = {inp for _, inp in outputs(broker, topic, "read_uncommitted")}
        assert written_inputs <= everything, f"{topic}: the log lost output the child wrote"


def all_inputs() -> set[tuple[int, int]]:
    return {(p, o) for p in range(INPUT_PARTITIONS) for o in range(RECORDS_PER_PARTITION)}


def inputs_of(ranges: dict[int, range]) -> set[tuple[int, int]]:
    return {(p, o) for p, span in ranges.items() for o in span}


# -- the tests -------------------------------------------------------------------------------


def test_every_child_scenario_has_an_expectation() -> None:
    assert set(EXPECTED) == set(SCENARIOS)


def test_every_transaction_touches_every_output_partition() -> None:
    """Otherwise a marker scenario could miss the partition it is about."""
    for first in range(0, RECORDS_PER_PARTITION, TXN_SIZE):
        inputs = [(p, o) for p in range(INPUT_PARTITIONS) for o in range(first, first + TXN_SIZE)]
        by_key = {(murmur2(input_key(p, o)) & 0x7FFFFFFF) % OUTPUT_PARTITIONS for p, o in inputs}
        by_offset = {o % OUTPUT_PARTITIONS for _, o in inputs}
        assert by_key == by_offset == set(range(OUTPUT_PARTITIONS)), first


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", [2, 1])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_restart_finishes_the_transaction_as_decided(tmp_path: Path, scenario: str, version: int) -> None:
    expected = EXPECTED[scenario]
    config = {**CONFIG, "transaction.version": version}
    data_dir, side_path = tmp_path / "data", tmp_path / "side"
    prepare(data_dir)
    after = SCENARIOS[scenario].after
    side = run_child(data_dir, side_path, after or scenario, version)
    if after is not None:  # and again, in the middle of the roll-forward
        roll_forward = run_child(data_dir, tmp_path / "side-roll-forward", scenario, version)
        assert len(roll_forward.markers_after_armed()) == 1, roll_forward.lines
        assert roll_forward.decided is None, "the roll-forward must not decide anything anew"

    # what the child's coordinator had decided when it died
    assert side.decided == expected.decided, side.after_armed()
    if SCENARIOS[after or scenario].crash_after[0] == "marker":
        assert len(side.markers_after_armed()) == 1, side.markers_after_armed()
    pid, epoch = side.producer
    before = inputs_of(side.txn_ranges(TARGET_TXN - 1))
    target = inputs_of(side.txn_ranges(TARGET_TXN))
    committed = before | target if expected.decided == "commit" else before
    # version 2: the client's own EndTxn bumped the epoch (the coordinator's aborts bump as before)
    client_bump = int(version >= 2 and SCENARIOS[after or scenario].ending in ("commit", "abort"))

    with Broker(data_dir, **config) as broker:
        tc = broker.engine.transactions.coordinator
        if expected.recover is not None:
            # never prepared: the transaction is still open and holds everything back
            assert state_of(broker).state is S.ONGOING
            assert set(unstable(broker)) == set(stable_partitions(broker))
            fetched = broker.engine.call(broker.engine.groups.coordinator.fetch_offsets, GROUP,
                                         [(INPUT, p) for p in range(INPUT_PARTITIONS)], True)
            assert all(isinstance(f.error, UnstableOffsetCommitError) for f in fetched.values()), fetched
            for topic in OUTPUTS:
                assert {inp for _, inp in outputs(broker, topic, "read_committed")} == before
            if expected.recover == "init":
                broker.producer(transactional_id=TXN_ID).init_transactions()
            else:
                eventually(lambda: bool(broker.engine.call(broker.engine.jobs.abort_timed_out_transactions))
                           or state_of(broker).state is not S.ONGOING, SETTLE_DEADLINE_S, "transaction timeout")

        # nobody retries anything: the restart alone must roll a prepared transaction forward
        eventually(lambda: state_of(broker).state is expected.settled, SETTLE_DEADLINE_S,
                   f"{expected.settled.display} (stuck in {state_of(broker).state.display}?)")
        settled = state_of(broker)
        assert (settled.producer_id, settled.producer_epoch) == (pid, epoch + expected.epoch_bumps + client_bump)
        assert not settled.partitions
        check_outcome(broker, committed, before | target)

        if expected.epoch_bumps:
            with pytest.raises(ProducerFencedError):  # the child's producer is a zombie now
                broker.engine.call(tc.end_txn, TXN_ID, pid, epoch, True)
        else:
            # the child's producer, had it outlived the broker, retries EndTxn: OK with the
            # decided command, INVALID_TXN_STATE with the other; then it carries on
            answered = broker.engine.call(tc.end_txn, TXN_ID, pid, epoch, expected.decided == "commit", version)
            assert answered == (pid, epoch + client_bump)
            with pytest.raises(InvalidTxnStateError):
                broker.engine.call(tc.end_txn, TXN_ID, pid, epoch, expected.decided != "commit", version)
            carry_on(broker, pid, epoch + client_bump, side.sequences, version)
            check_outcome(broker, committed, before | target)

        # the application restarts on top of it and finishes the input, exactly once
        assert run_to_end(broker) >= 1
        assert state_of(broker).state is S.COMPLETE_COMMIT
        check_outcome(broker, all_inputs(), all_inputs())

    with Broker(data_dir, **config) as broker:  # and it all survives another restart
        assert state_of(broker).state is S.COMPLETE_COMMIT
        check_outcome(broker, all_inputs(), all_inputs())
        assert committed_offsets(broker) == {p: RECORDS_PER_PARTITION for p in range(INPUT_PARTITIONS)}
