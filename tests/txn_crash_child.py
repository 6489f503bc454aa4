"""The process tests/test_txn_crash_matrix.py kills: one consume-transform-produce
application that SIGKILLs itself at a chosen point inside the transaction coordinator.

Run from the repository root, on a directory made by :func:`prepare`::

    python -m tests.txn_crash_child DATA_DIR SIDE_FILE SCENARIO [TRANSACTION_VERSION]

It opens ``Broker(DATA_DIR)``, joins the group ``GROUP`` with a read_committed
consumer on ``INPUT`` and runs transactions with the transactional id ``TXN_ID``:
each takes the next ``TXN_SIZE`` records of every input partition, sends two
transformed copies of each (to ``out-a`` by key, to ``out-b`` by input offset, so
every transaction touches every output partition) and commits the consumer's
offsets with ``send_offsets_to_transaction``. Transaction 0 commits normally; the
crash point of SCENARIO (:data:`SCENARIOS`) is armed for transaction 1. The broker
finalizes TRANSACTION_VERSION (2 unless given), which the embedded producer follows:
with 2, no AddPartitionsToTxn/AddOffsetsToTxn and an epoch bump at every EndTxn.

Crash points are injected by wrapping the coordinator IO (EngineCoordinatorIO,
the engine's ``transaction_coordinator.io``, which the transaction and group
coordinators share): once the chosen write is durable, the process sends itself
SIGKILL, so nothing after it -- not even the coordinator's next line -- runs. A
scenario with ``after`` set is no application run: it reopens the directory another
scenario crashed, armed from the start, and dies in the middle of the roll-forward.

SIDE_FILE gets one flushed line per fact, written before the next step can happen
(a write the kernel has is not lost by SIGKILL)::

    producer <producer id> <epoch>                 init_transactions returned, and again as the
                                                   target transaction begins (version 2 bumped it)
    txn <n> <partition>:<first>-<end> ...          transaction n takes these input offsets
    sequences <topic>:<partition>:<next> ...       the producer's next sequence per partition
    armed <scenario>                               the crash point is live from here on
    durable-log <STATE> <producer id> <epoch>      a transaction-log record is durable
    decided commit|abort                           ... and it was PREPARE_COMMIT/PREPARE_ABORT
    durable-marker <topic> <partition> commit|abort
    durable-offsets <partition>                    a TxnOffsetCommit batch is durable
    committed <n>                                  commit_transaction(n) returned
    crash <scenario>                               the very next thing is SIGKILL

A run that reaches the end without crashing writes ``no-crash`` and exits with 3.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, TextIO

from exactly.app import Broker
from exactly.app.client.consumer import Consumer
from exactly.app.engine.coordinator_io import EngineCoordinatorIO
from exactly.app.client.producer import Producer
from exactly.coordinator import offsets_log, transaction_log
from exactly.coordinator.transaction_state import TransactionState
from exactly.storage.record_batch import SimpleRecord, encode_batch

TXN_ID = "crash-app"
GROUP = "crash-group"
INPUT = "in"
OUTPUTS = ("out-a", "out-b")
INPUT_PARTITIONS = 2
OUTPUT_PARTITIONS = 2
RECORDS_PER_PARTITION = 12
#: input records of each input partition per transaction
TXN_SIZE = 4
#: the transaction the crash point is armed for
TARGET_TXN = 1
CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}
#: a static member: a restarted application takes over its partitions without
#: waiting for the dead member's session to time out
CONSUMER_CONFIG = dict(group_id=GROUP, isolation_level="read_committed", enable_auto_commit=False,
                       auto_offset_reset="earliest", group_instance_id="crash-app-0",
                       session_timeout_ms=6000)
#: short enough that the parent can watch the timeout job abort an open transaction
SHORT_TXN_TIMEOUT_MS = 500
#: a child the test forgot to kill stops by itself
LIFETIME_S = 60

S = TransactionState


@dataclass(frozen=True)
class Scenario:
    """Where the child kills itself during transaction TARGET_TXN.

    ``ending``: how the child ends the target transaction -- ``commit``, ``abort``,
    ``init`` (a new producer instance calls init_transactions while it is open) or
    ``offsets`` (it dies in send_offsets_to_transaction). ``crash_after``:
    ``("log", State)`` -- that transaction-log record is durable; ``("marker",
    topic)`` -- the first marker on ``topic`` is durable and no other marker was
    written; ``("offsets",)`` -- the transactional offset commit is durable.
    ``after``: the scenario is not a run of the application but the next opening of
    the directory that scenario ``after`` crashed, with the crash point armed from
    the start -- the coordinator dies again while rolling forward.
    """

    ending: str
    crash_after: tuple[Any, ...]
    txn_timeout_ms: int = 60_000
    #: a scenario run on the directory another one crashed: it kills the roll-forward
    after: str | None = None


SCENARIOS: dict[str, Scenario] = {
    "prepare-commit": Scenario("commit", ("log", S.PREPARE_COMMIT)),
    "commit-marker-on-output": Scenario("commit", ("marker", "out-a")),
    "commit-marker-on-offsets": Scenario("commit", ("marker", offsets_log.TOPIC)),
    "complete-commit": Scenario("commit", ("log", S.COMPLETE_COMMIT)),
    "init-after-epoch-bump": Scenario("init", ("log", S.EMPTY)),
    "init-after-fencing-prepare-abort": Scenario("init", ("log", S.PREPARE_ABORT)),
    "txn-offset-commit": Scenario("offsets", ("offsets",)),
    "txn-offset-commit-then-timeout": Scenario("offsets", ("offsets",), SHORT_TXN_TIMEOUT_MS),
    "prepare-abort": Scenario("abort", ("log", S.PREPARE_ABORT)),
    "abort-marker-on-output": Scenario("abort", ("marker", "out-b")),
    "init-after-fencing-complete-abort": Scenario("init", ("log", S.COMPLETE_ABORT)),
    # killed again while the restarted coordinator rolls the transaction forward
    "roll-forward-commit-marker": Scenario("commit", ("marker", "out-b"), after="commit-marker-on-offsets"),
    "roll-forward-abort-marker": Scenario("abort", ("marker", "out-a"), after="prepare-abort"),
}


# -- the data -----------------------------------------------------------------------------


def input_key(partition: int, offset: int) -> bytes:
    return b"key-%d-%d" % (partition, offset)


def input_value(partition: int, offset: int) -> bytes:
    return b"in-%d-%d" % (partition, offset)


def parse_output(value: bytes) -> tuple[str, int, int]:
    """``(output topic, input partition, input offset)`` of an output record's value."""
    topic, partition, offset = value.decode().split("-")
    return f"out-{topic}", int(partition), int(offset)


def prepare(data_dir: Path) -> None:
    """Topics and the input records (written by the test before the first child)."""
    with Broker(data_dir, **CONFIG) as broker:
        broker.create_topic(INPUT, INPUT_PARTITIONS)
        for topic in OUTPUTS:
            broker.create_topic(topic, OUTPUT_PARTITIONS)
        for partition in range(INPUT_PARTITIONS):
            records = [SimpleRecord(input_value(partition, offset), key=input_key(partition, offset))
                       for offset in range(RECORDS_PER_PARTITION)]
            broker.produce(INPUT, partition, encode_batch(records))


# -- the application ------------------------------------------------------------------------


def poll_inputs(consumer: Consumer, wanted: int, timeout_s: float = 30.0) -> dict[tuple[str, int], list]:
    """Poll until ``wanted`` records arrived; returns them by input partition."""
    deadline = time.monotonic() + timeout_s
    by_partition: dict[tuple[str, int], list] = {}
    got = 0
    while got < wanted:
        if time.monotonic() > deadline:
            raise TimeoutError(f"polled {got} of {wanted} input records")
        for record in consumer.poll(timeout_ms=500):
            by_partition.setdefault((record.topic, record.partition), []).append(record)
            got += 1
    return by_partition


def send_outputs(producer: Producer, records: Sequence[Any]) -> list[tuple[str, int]]:
    """Send both outputs of each input record and flush them (durable, as a crash
    point after this expects); the partitions they went to."""
    futures = []
    for record in records:
        futures.append(producer.send(OUTPUTS[0], b"a-" + record.value[3:], key=record.key))
        futures.append(producer.send(OUTPUTS[1], b"b-" + record.value[3:], key=record.key,
                                     partition=record.offset % OUTPUT_PARTITIONS))
    producer.flush()
    return [future.get(timeout=0)[:2] for future in futures]


def next_offsets(batch: dict[tuple[str, int], list]) -> dict[tuple[str, int], int]:
    return {tp: records[-1].offset + 1 for tp, records in batch.items() if records}


def split(by_partition: dict[tuple[str, int], list]) -> list[dict[tuple[str, int], list]]:
    """Transactions of TXN_SIZE records per input partition, in offset order."""
    longest = max((len(records) for records in by_partition.values()), default=0)
    return [{tp: records[i:i + TXN_SIZE] for tp, records in by_partition.items() if records[i:i + TXN_SIZE]}
            for i in range(0, longest, TXN_SIZE)]


def run_to_end(broker: Broker, txn_timeout_ms: int = 60_000) -> int:
    """The application as it restarts after a crash: a new producer instance fences
    and finishes whatever its predecessor left, the consumer starts at the committed
    offsets, and everything left is processed; returns the transactions committed."""
    producer = broker.producer(transactional_id=TXN_ID, transaction_timeout_ms=txn_timeout_ms)
    producer.init_transactions()
    consumer = broker.consumer(**CONSUMER_CONFIG)
    consumer.subscribe([INPUT])
    try:
        committed = {tp: offset or 0 for tp, offset in consumer.committed(
            [(INPUT, p) for p in range(INPUT_PARTITIONS)]).items()}
        left = sum(RECORDS_PER_PARTITION - offset for offset in committed.values())
        transactions = split(poll_inputs(consumer, left)) if left else []
        for batch in transactions:
            producer.begin_transaction()
            send_outputs(producer, [r for records in batch.values() for r in records])
            producer.send_offsets_to_transaction(next_offsets(batch), consumer.group_metadata())
            producer.commit_transaction()
        return len(transactions)
    finally:
        consumer.close()
        producer.close()


# -- the crash points -------------------------------------------------------------------------


class SideFile:
    """Lines the test reads back; each one flushed before the call returns."""

    def __init__(self, file: TextIO) -> None:
        self.file = file
        self._lock = threading.Lock()  # the engine's loop and the main thread both write

    def line(self, text: str) -> None:
        with self._lock:
            self.file.write(text + "\n")
            self.file.flush()


class CrashPoints:
    """Wraps the coordinator IO: records every durable write, and SIGKILLs the
    process after the scenario's one once :meth:`arm` was called.

    The wrappers go on EngineCoordinatorIO itself, before the broker opens, so they
    also see the writes of the roll-forward the engine starts on opening; the engine's
    instance (``broker.engine.transactions.coordinator.io``, shared by both
    coordinators) is this child's only one.
    """

    def __init__(self, side: SideFile, name: str) -> None:
        self.side = side
        self.name = name
        self.scenario = SCENARIOS[name]
        self.armed = False
        self._marker_let_through = False
        self._append_txn_log = EngineCoordinatorIO.append_txn_log
        self._write_marker = EngineCoordinatorIO.write_marker
        self._append_offsets_log = EngineCoordinatorIO.append_offsets_log
        points = self

        async def append_txn_log(io, partition, key, value, headers=()):
            return await points.append_txn_log(io, partition, key, value, headers)

        async def write_marker(io, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit):
            return await points.write_marker(io, topic, partition, producer_id, producer_epoch,
                                             coordinator_epoch, commit)

        async def append_offsets_log(io, partition, records, producer_id=-1, producer_epoch=-1):
            return await points.append_offsets_log(io, partition, records, producer_id, producer_epoch)

        EngineCoordinatorIO.append_txn_log = append_txn_log  # type: ignore[method-assign]
        EngineCoordinatorIO.write_marker = write_marker  # type: ignore[method-assign]
        EngineCoordinatorIO.append_offsets_log = append_offsets_log  # type: ignore[method-assign]

    def arm(self) -> None:
        self.side.line(f"armed {self.name}")
        self.armed = True

    def crash(self) -> None:
        self.side.line(f"crash {self.name}")
        os.kill(os.getpid(), signal.SIGKILL)

    async def append_txn_log(self, io: EngineCoordinatorIO, partition: int, key: bytes,
                             value: bytes | None, headers: transaction_log.Headers = ()) -> int:
        offset = await self._append_txn_log(io, partition, key, value, headers)
        transit = transaction_log.decode(key, value).transit
        if transit is not None:
            self.side.line(f"durable-log {transit.state.name} {transit.producer_id} {transit.producer_epoch}")
            if transit.state is S.PREPARE_COMMIT:
                self.side.line("decided commit")
            elif transit.state is S.PREPARE_ABORT:
                self.side.line("decided abort")
            if self.armed and self.scenario.crash_after == ("log", transit.state):
                self.crash()
        return offset

    async def write_marker(self, io: EngineCoordinatorIO, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, commit: bool) -> None:
        if self.armed and self.scenario.crash_after[0] == "marker":
            if topic != self.scenario.crash_after[1] or self._marker_let_through:
                await asyncio.get_running_loop().create_future()  # never written: we die first
            self._marker_let_through = True
        await self._write_marker(io, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit)
        self.side.line(f"durable-marker {topic} {partition} {'commit' if commit else 'abort'}")
        if self.armed and self.scenario.crash_after[0] == "marker":
            self.crash()

    async def append_offsets_log(self, io: EngineCoordinatorIO, partition: int,
                                 records: list[tuple[bytes, bytes | None]], producer_id: int = -1,
                                 producer_epoch: int = -1) -> None:
        await self._append_offsets_log(io, partition, records, producer_id, producer_epoch)
        if producer_id >= 0:
            self.side.line(f"durable-offsets {partition}")
            if self.armed and self.scenario.crash_after == ("offsets",):
                self.crash()


def describe_txn(n: int, batch: dict[tuple[str, int], list]) -> str:
    ranges = " ".join(f"{tp[1]}:{records[0].offset}-{records[-1].offset + 1}"
                      for tp, records in sorted(batch.items()))
    return f"txn {n} {ranges}"


def run(data_dir: Path, side: SideFile, name: str, version: int) -> None:
    """Transaction 0 commits; transaction 1 ends the scenario's way with its crash point armed."""
    scenario = SCENARIOS[name]
    points = CrashPoints(side, name)
    broker = Broker(data_dir, **CONFIG, **{"transaction.version": version})
    producer = broker.producer(transactional_id=TXN_ID, transaction_timeout_ms=scenario.txn_timeout_ms)
    producer.init_transactions()
    side.line(f"producer {producer.producer_id} {producer.producer_epoch}")
    consumer = broker.consumer(**CONSUMER_CONFIG)
    consumer.subscribe([INPUT])
    transactions = split(poll_inputs(consumer, INPUT_PARTITIONS * RECORDS_PER_PARTITION))
    sent: Counter[tuple[str, int]] = Counter()  # a sequence per record: the next sequence, per partition
    for n, batch in enumerate(transactions[:TARGET_TXN + 1]):
        side.line(describe_txn(n, batch))
        if n == TARGET_TXN:
            side.line(f"producer {producer.producer_id} {producer.producer_epoch}")
        producer.begin_transaction()
        sent.update(send_outputs(producer, [r for records in batch.values() for r in records]))
        if n == TARGET_TXN:
            # what a producer that outlived the broker would send next on each partition
            side.line("sequences " + " ".join(f"{topic}:{partition}:{sequence}"
                                              for (topic, partition), sequence in sorted(sent.items())))
            if scenario.ending == "offsets":
                points.arm()
        producer.send_offsets_to_transaction(next_offsets(batch), consumer.group_metadata())
        if n < TARGET_TXN:
            producer.commit_transaction()
            side.line(f"committed {n}")
            continue
        if not points.armed:
            points.arm()
        if scenario.ending == "commit":
            producer.commit_transaction()
        elif scenario.ending == "abort":
            producer.abort_transaction()
        elif scenario.ending == "init":
            broker.producer(transactional_id=TXN_ID).init_transactions()


def recover(data_dir: Path, side: SideFile, name: str, version: int, timeout_s: float = 20.0) -> None:
    """Open the crashed directory with the crash point armed from the start, so the
    roll-forward the engine begins on opening is what gets killed."""
    points = CrashPoints(side, name)
    points.arm()
    Broker(data_dir, **CONFIG, **{"transaction.version": version})
    threading.Event().wait(timeout_s)  # the roll-forward kills us long before this


def main(argv: Sequence[str]) -> int:
    data_dir, side_path, name = Path(argv[0]), Path(argv[1]), argv[2]
    version = int(argv[3]) if len(argv) > 3 else 2
    if name not in SCENARIOS:
        sys.exit(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    # a child the test lost track of dies by itself
    reaper = threading.Timer(LIFETIME_S, os.kill, (os.getpid(), signal.SIGKILL))
    reaper.daemon = True
    reaper.start()
    with open(side_path, "a") as f:
        side = SideFile(f)
        if SCENARIOS[name].after is None:
            run(data_dir, side, name, version)
        else:
            recover(data_dir, side, name, version)
        side.line("no-crash")
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
