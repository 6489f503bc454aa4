#!/usr/bin/env python3
"""The embedded producer against ready-made batches, measured in one run on one disk.

    .venv/bin/python bench/bench_producer.py            # full run (about two minutes)
    .venv/bin/python bench/bench_producer.py --quick    # a few seconds, for checking the script

Every variant writes 1 KiB records to a new topic of 2 partitions with acks=all:

* ready-made  -- ``Broker.produce`` of idempotent batches of 100 records, encoded before
                 the clock starts, from one thread, alternating partitions (each call
                 returns once its batch is fsynced);
* idempotent  -- ``producer.send`` of each record (alternating partitions), then ``flush``;
* transactional, commit every 100 ms -- the same inside transactions.

The producer runs twice: with Kafka's defaults (batch.size 16384: 15 records a batch)
and with batch.size large enough for the 100 records of a ready-made batch (the same
unit of work on the broker). Goals: idempotent >= 50% of ready-made; transactional >=
95% of idempotent. The trials of the variants are interleaved so drift in the disk's
speed (and the load of anything else on the machine) affects them alike, each round in
a rotated order; each figure is the median of its trials, [min..max] beside it.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

RECORD = b"x" * 1024
RECORDS_PER_BATCH = 100
#: batch.size holding 100 records of 1 KiB (1,034 bytes each encoded, plus the 61-byte header)
MATCHED_BATCH_SIZE = 104_000
PARTITIONS = 2
IDEMPOTENT_GOAL = 0.50
TRANSACTIONAL_GOAL = 0.95
COMMIT_EVERY_S = 0.1


@dataclass(frozen=True)
class Sizes:
    trial_s: float
    trials: int


FULL = Sizes(trial_s=4.0, trials=5)
QUICK = Sizes(trial_s=0.5, trials=1)


@dataclass
class Trial:
    records: int
    seconds: float
    batches: int  # produce requests the engine took

    @property
    def mb_per_s(self) -> float:
        return self.records * len(RECORD) / self.seconds / 1e6


Run = Callable[[Broker, str, float], tuple[int, float]]  # -> (records, seconds measured)


def ready_made(broker: Broker, topic: str, seconds: float) -> tuple[int, float]:
    """Pre-encoded idempotent 100-record batches through Broker.produce, acks=all."""
    producer_id, epoch = broker.engine.call(broker.engine._transaction_coordinator.init_producer_id, None, -1)
    records = [SimpleRecord(RECORD, timestamp=int(time.time() * 1000))] * RECORDS_PER_BATCH
    # enough batches for the trial at several times the speed measured here
    batches = [[encode_batch(records, producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=i * RECORDS_PER_BATCH) for i in range(int(seconds * 1_500))]
               for _ in range(PARTITIONS)]
    sent = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        broker.produce(topic, sent % PARTITIONS, batches[sent % PARTITIONS][sent // PARTITIONS], acks=-1)
        sent += 1
    return sent * RECORDS_PER_BATCH, time.perf_counter() - started


def embedded(batch_size: int, transactional: bool) -> Run:
    def run(broker: Broker, topic: str, seconds: float) -> tuple[int, float]:
        if transactional:
            producer = broker.producer(transactional_id=f"bench-{topic}", batch_size=batch_size)
            producer.init_transactions()
        else:
            producer = broker.producer(batch_size=batch_size)
        send = producer.send
        sent = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            if transactional:
                producer.begin_transaction()
            until = min(deadline, time.perf_counter() + COMMIT_EVERY_S) if transactional else deadline
            while time.perf_counter() < until:
                for _ in range(100):  # the clock read once per 100 sends
                    send(topic, RECORD, partition=sent % PARTITIONS)
                    sent += 1
            if transactional:
                producer.commit_transaction()
        producer.close()  # flushes
        return sent, time.perf_counter() - started
    return run


def trial(broker: Broker, name: str, run: Run, seconds: float) -> Trial:
    topic = "bench-" + "".join(c if c.isalnum() else "-" for c in name)
    broker.create_topic(topic, partitions=PARTITIONS)
    requests = broker.engine.counters.produce_requests
    records, elapsed = run(broker, topic, seconds)
    batches = broker.engine.counters.produce_requests - requests
    broker.delete_topic(topic)  # keep the disk use of a run small
    return Trial(records, elapsed, batches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for checking the script")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    workdir = args.workdir / f"producer-{datetime.datetime.now():%H%M%S}"
    workdir.mkdir(parents=True)
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python bench/bench_producer.py{' --quick' if args.quick else ''}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} on {platform.platform()}")
    variants: dict[str, Run] = {
        "ready-made 100-record batches": ready_made,
        "idempotent, batch.size 16384": embedded(16_384, False),
        "transactional, batch.size 16384": embedded(16_384, True),
        f"idempotent, batch.size {MATCHED_BATCH_SIZE}": embedded(MATCHED_BATCH_SIZE, False),
        f"transactional, batch.size {MATCHED_BATCH_SIZE}": embedded(MATCHED_BATCH_SIZE, True),
    }
    trials: dict[str, list[Trial]] = {name: [] for name in variants}
    try:
        with Broker(workdir / "data") as broker:
            names = list(variants)
            for round_ in range(sizes.trials):  # interleaved, each round in a rotated order
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    trials[name].append(trial(broker, f"{round_}-{name}", variants[name], sizes.trial_s))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rates = {name: statistics.median(t.mb_per_s for t in ts) for name, ts in trials.items()}
    base = rates["ready-made 100-record batches"]
    print(f"\nthroughput: 1 KiB records, acks=all, {PARTITIONS} partitions, "
          f"transactions commit every {COMMIT_EVERY_S * 1000:.0f} ms")
    for name, ts in trials.items():
        per_batch = sum(t.records for t in ts) / max(1, sum(t.batches for t in ts))
        print(f"  {name:<36} {rates[name]:8.1f} MB/s  ({rates[name] / base:6.1%} of ready-made)"
              f"  [{min(t.mb_per_s for t in ts):.1f}..{max(t.mb_per_s for t in ts):.1f}]"
              f"  {per_batch:6.1f} records/batch")
    print("\nsummary:")
    for batch_size in (16_384, MATCHED_BATCH_SIZE):
        idempotent = rates[f"idempotent, batch.size {batch_size}"]
        transactional = rates[f"transactional, batch.size {batch_size}"]
        for ratio, goal, what in ((idempotent / base, IDEMPOTENT_GOAL, "idempotent >= 50% of ready-made"),
                                  (transactional / idempotent, TRANSACTIONAL_GOAL,
                                   "transactional >= 95% of idempotent")):
            print(f"  [{'  MET  ' if ratio >= goal else 'NOT MET'}] batch.size {batch_size:>6}: "
                  f"{what}: {ratio:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
