"""The process tests/test_eos_loop.py kills again and again: a consume-transform-produce
application with the embedded client, run until its input is used up.

Run from the repository root, on a directory made by :func:`prepare`::

    python -m tests.eos_child DATA_DIR PROGRESS_FILE SEED [--jobs-every N]

It opens ``Broker(DATA_DIR)``, a transactional producer (``TXN_ID``) and a
read_committed group consumer (``GROUP``, no auto-commit) on ``INPUT``, and loops:
poll, take a few records from the front of each partition (how many, 0 to
``MAX_PER_PARTITION`` each, is drawn from SEED; the rest is sought back to and
comes again), send each one transformed to ``OUTPUT`` with its key, put the
consumer's next offsets into the transaction with
``send_offsets_to_transaction(..., consumer.group_metadata())`` and commit. It
stops once its positions reach the input's end.

With ``--jobs-every N`` it also does, after every N commits, what the broker's
scheduler does (producer-state snapshots, a log-cleaner round, the recovery-point
checkpoint), on internal topics with small segments so the cleaner has work.

PROGRESS_FILE gets one flushed line per fact, each written only after the fact::

    S <producer id> <epoch> <committed offset of in-0> <... in-1>   started (init_transactions returned;
                                                                    0 where nothing is committed)
    B <records>                                                     a transaction begins
    P                                                               one of its records is sent (durable)
    C <records> <next offset of in-0> <... in-1>                    commit_transaction returned
    DONE                                                            every input record is processed

A next offset of -1 means the transaction had nothing from that partition.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence, TextIO

from exactly.app import Broker
from exactly.storage.record_batch import SimpleRecord, encode_batch

TXN_ID = "eos-app"
GROUP = "eos-group"
INPUT = "in"
OUTPUT = "out"
PARTITIONS = 2
KEYS_PER_PARTITION = 7
CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}
#: a static member: a restarted application takes over its partitions at once
#: instead of waiting for the dead member's session to time out
CONSUMER_CONFIG = dict(group_id=GROUP, isolation_level="read_committed", enable_auto_commit=False,
                       auto_offset_reset="earliest", group_instance_id="eos-app-0",
                       session_timeout_ms=6000)
#: at most this many records of each partition per transaction
MAX_PER_PARTITION = 4
#: with the scheduled jobs: internal segments small enough for the cleaner to have work
JOBS_CONFIG = {**CONFIG, "transaction.state.log.segment.bytes": 2048,
               "offsets.topic.segment.bytes": 2048}
#: a child the test forgot to kill stops by itself
LIFETIME_S = 180


def input_key(partition: int, index: int) -> bytes:
    """Keys are never shared between input partitions, so per-key order is per-partition order."""
    return b"p%d-k%d" % (partition, index % KEYS_PER_PARTITION)


def input_value(partition: int, offset: int) -> bytes:
    return b"in-%d-%d" % (partition, offset)


def transform(value: bytes) -> bytes:
    return b"out-" + value[3:]


def parse_output(value: bytes) -> tuple[int, int]:
    """``(input partition, input offset)`` of an output record's value."""
    kind, partition, offset = value.decode().split("-")
    assert kind == "out", value
    return int(partition), int(offset)


def prepare(data_dir: Path, records_per_partition: int) -> None:
    """The topics and the numbered input (written by the test before the first child)."""
    with Broker(data_dir, **CONFIG) as broker:
        broker.create_topic(INPUT, PARTITIONS)
        broker.create_topic(OUTPUT, PARTITIONS)
        for partition in range(PARTITIONS):
            for first in range(0, records_per_partition, 50):
                offsets = range(first, min(first + 50, records_per_partition))
                broker.produce(INPUT, partition, encode_batch(
                    [SimpleRecord(input_value(partition, o), key=input_key(partition, o)) for o in offsets]))


class Progress:
    """The progress file; every line is flushed before the next step."""

    def __init__(self, file: TextIO) -> None:
        self.file = file

    def line(self, text: str) -> None:
        self.file.write(text + "\n")
        self.file.flush()


def take_some(polled: list, rng: random.Random) -> list:
    """The next transaction: up to ``MAX_PER_PARTITION`` records (maybe none) from the
    front of each partition's polled records, at least one in all."""
    by_partition: dict[tuple[str, int], list] = {}
    for record in polled:
        by_partition.setdefault((record.topic, record.partition), []).append(record)
    counts = {tp: rng.randint(0, MAX_PER_PARTITION) for tp in by_partition}
    if not any(counts.values()):
        counts[rng.choice(sorted(by_partition))] = 1
    return [r for tp, records in sorted(by_partition.items()) for r in records[:counts[tp]]]


def run_jobs(broker: Broker) -> None:
    """What the broker's scheduler does now and then (exactly/app/engine/scheduler.py)."""
    engine = broker.engine
    engine.call(engine.jobs.take_snapshots)
    engine.call(engine.jobs.compact_logs)
    engine.call(engine.jobs.checkpoint)


def run(broker: Broker, progress: Progress, rng: random.Random, jobs_every: int = 0,
        stall_at: int | None = None) -> None:
    """Process the input to its end. With ``stall_at``, the first transaction that starts
    once that many input records are committed stops after its records are sent ("P")
    and waits to be killed there: a kill inside a transaction, never just after it."""
    partitions = [(INPUT, p) for p in range(PARTITIONS)]
    ends = {tp: broker.list_offsets(*tp, -1) for tp in partitions}
    producer = broker.producer(transactional_id=TXN_ID)
    producer.init_transactions()  # first: it aborts what a killed predecessor left open
    consumer = broker.consumer(**CONSUMER_CONFIG)
    consumer.subscribe([INPUT])
    committed = consumer.committed(partitions)
    progress.line(f"S {producer.producer_id} {producer.producer_epoch} "
                  + " ".join(str(committed[tp] or 0) for tp in partitions))
    commits = 0
    done = sum(committed[tp] or 0 for tp in partitions)  # input records committed so far
    while True:
        polled = consumer.poll(timeout_ms=100)
        if not polled:
            # a restarted static member may poll before its rejoin has its assignment
            if set(consumer.assignment()) == set(partitions) and all(
                    consumer.position(tp) >= ends[tp] for tp in partitions):
                return
            continue
        records = take_some(polled, rng)
        next_offsets = {(r.topic, r.partition): r.offset + 1 for r in records}
        first_polled: dict[tuple[str, int], int] = {}
        for record in polled:
            first_polled.setdefault((record.topic, record.partition), record.offset)
        for tp, offset in first_polled.items():  # what was polled but not taken comes again
            consumer.seek(tp, next_offsets.get(tp, offset))
        producer.begin_transaction()
        progress.line(f"B {len(records)}")
        for record in records:
            producer.send(OUTPUT, transform(record.value), key=record.key)
        producer.flush()  # the records are durable before the child says they are sent
        for _ in records:
            progress.line("P")
        if stall_at is not None and done >= stall_at:
            threading.Event().wait()  # until the test's SIGKILL (or the reaper's)
        producer.send_offsets_to_transaction(next_offsets, consumer.group_metadata())
        producer.commit_transaction()
        progress.line(f"C {len(records)} " + " ".join(str(next_offsets.get(tp, -1)) for tp in partitions))
        commits += 1
        done += len(records)
        if jobs_every and commits % jobs_every == 0:
            run_jobs(broker)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("progress_file", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("--jobs-every", type=int, default=0)
    parser.add_argument("--stall-at", type=int, default=None,
                        help="stop inside the first transaction begun once this many records are committed")
    args = parser.parse_args(argv)
    faulthandler.enable(all_threads=True)  # SIGABRT dumps every thread: the test's view of a stall
    reaper = threading.Timer(LIFETIME_S, os.kill, (os.getpid(), signal.SIGKILL))
    reaper.daemon = True
    reaper.start()
    config = JOBS_CONFIG if args.jobs_every else CONFIG
    with Broker(args.data_dir, **config) as broker, open(args.progress_file, "a") as f:
        progress = Progress(f)
        run(broker, progress, random.Random(args.seed), args.jobs_every, args.stall_at)
        progress.line("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
