#!/usr/bin/env python3
"""Transaction benchmarks, measured in one run on one disk.

    .venv/bin/python bench/bench_transactions.py            # full run (about a minute)
    .venv/bin/python bench/bench_transactions.py --quick    # a few seconds, for checking the script

1. throughput -- the embedded producer sending 1 KiB records: idempotent without
                 transactions, then transactional committing every 100 ms and every
                 10 ms, each with transaction version 1 (AddPartitionsToTxn and
                 AddOffsetsToTxn, the epoch kept) and 2 (KIP-890 part 2: partitions
                 added by the batches, the epoch bumped at every EndTxn) -- the broker's
                 ``transaction.version``, which the producer follows; the ratio
                 transactional / idempotent (goal at 100 ms: >= 95%).
2. commit     -- commit_transaction latency p50/p99: EndTxn until COMPLETE is durable
                 (PREPARE written, markers on every partition durable, COMPLETE durable).
3. startup    -- Broker(...) over a data directory holding 10,000 transactional ids
                 (goal: coordinator start < 2 s).
4. wire       -- (``--wire``) Kafka 4.4's Java producer (ProducerPerformance, 1 KiB
                 records, acks=all) over the Kafka protocol: idempotent, then
                 transactional with a transaction per 100 ms on a broker finalizing
                 transaction version 1 and on one finalizing 2.

The trials of the throughput variants are interleaved so drift in the disk's speed
affects them alike; each figure is the median of its trials.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker  # noqa: E402

RECORD = b"x" * 1024
THROUGHPUT_GOAL = 0.95
STARTUP_GOAL_S = 2.0


@dataclass(frozen=True)
class Sizes:
    trial_s: float
    trials: int
    transactional_ids: int


FULL = Sizes(trial_s=4.0, trials=3, transactional_ids=10_000)
QUICK = Sizes(trial_s=0.5, trials=1, transactional_ids=500)


def produce_for(broker: Broker, seconds: float, commit_every_s: float | None, txn_id: str,
                latencies: list[float]) -> int:
    """Send 1 KiB records for ``seconds``; returns how many were sent (and committed)."""
    if commit_every_s is None:
        producer = broker.producer()
    else:
        producer = broker.producer(transactional_id=txn_id)
        producer.init_transactions()
    sent = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if commit_every_s is not None:
            producer.begin_transaction()
        batch_end = time.perf_counter() + (commit_every_s or seconds)
        while time.perf_counter() < min(batch_end, deadline):
            producer.send("bench", RECORD, partition=sent % 2)
            sent += 1
        if commit_every_s is not None:
            started = time.perf_counter()
            producer.commit_transaction()
            latencies.append(time.perf_counter() - started)
    producer.close()
    return sent


def bench_throughput(workdir: Path, sizes: Sizes) -> dict[str, float]:
    #: name -> (commit interval, transaction version of the broker it runs on)
    variants = {"idempotent": (None, 2),
                "TV1 transactional, commit every 100 ms": (0.1, 1),
                "TV2 transactional, commit every 100 ms": (0.1, 2),
                "TV1 transactional, commit every 10 ms": (0.01, 1),
                "TV2 transactional, commit every 10 ms": (0.01, 2)}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    latencies: dict[str, list[float]] = {name: [] for name in variants}
    brokers = {version: Broker(workdir / f"throughput-tv{version}", **{"transaction.version": version})
               for version in (1, 2)}
    try:
        for broker in brokers.values():
            broker.create_topic("bench", partitions=2)
        for trial in range(sizes.trials):
            for name, (every, version) in variants.items():
                started = time.perf_counter()
                sent = produce_for(brokers[version], sizes.trial_s, every, f"bench-{trial}-{every}",
                                   latencies[name])
                rates[name].append(sent * len(RECORD) / (time.perf_counter() - started) / 1e6)
    finally:
        for broker in brokers.values():
            broker.close()
    base = statistics.median(rates["idempotent"])
    results = {}
    print("\n[1] throughput: embedded producer, 1 KiB records, acks=all, 2 partitions")
    for name in variants:
        rate = statistics.median(rates[name])
        results[name] = rate
        print(f"  {name:<40} {rate:8.2f} MB/s  ({rate / base:6.1%} of idempotent)"
              f"  [{min(rates[name]):.2f}..{max(rates[name]):.2f}]")
    print("\n[2] commit latency: commit_transaction = flush + EndTxn .. COMPLETE durable")
    for name in list(variants)[1:]:
        values = sorted(latencies[name])
        p50 = values[len(values) // 2] * 1000
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))] * 1000
        print(f"  {name:<40} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   ({len(values)} commits)")
        results[f"{name} p50 ms"] = p50
        results[f"{name} p99 ms"] = p99
    results["ratio at 100 ms"] = results["TV2 transactional, commit every 100 ms"] / base
    results["TV1 ratio at 100 ms"] = results["TV1 transactional, commit every 100 ms"] / base
    return results


def bench_startup(workdir: Path, sizes: Sizes) -> float:
    data = workdir / "startup"
    built = time.perf_counter()
    with Broker(data) as broker:
        broker.create_topic("bench", partitions=2)
        for i in range(sizes.transactional_ids):
            producer = broker.producer(transactional_id=f"txn-{i:05d}")
            producer.init_transactions()
            if i % 10 == 0:  # some with a finished transaction, as real ids have
                producer.begin_transaction()
                producer.send("bench", RECORD, partition=0)
                producer.commit_transaction()
    built = time.perf_counter() - built
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        broker = Broker(data)
        timings.append(time.perf_counter() - started)
        loaded = len(broker.engine._transaction_coordinator.txns)
        broker.close()
    assert loaded == sizes.transactional_ids, loaded
    startup = statistics.median(timings)
    print(f"\n[3] startup: Broker(...) over {sizes.transactional_ids:,} transactional ids "
          f"(built in {built:.1f} s)")
    print(f"  open, load both coordinators, roll forward  {startup:8.3f} s  "
          f"[{min(timings):.3f}..{max(timings):.3f}]")
    return startup


def perf_test(bootstrap: str, topic: str, records: int, transactional_id: str | None) -> float:
    """ProducerPerformance (Kafka's Java producer) to ``topic``; MB/s."""
    from tests.kafka.real_kafka import run_tool

    extra = ["--transactional-id", transactional_id, "--transaction-duration-ms", "100"] if transactional_id else []
    done = run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
                    "--record-size", str(len(RECORD)), "--throughput", "-1", *extra, "--command-property",
                    f"bootstrap.servers={bootstrap}", "acks=all", "enable.idempotence=true", timeout=600)
    summary = [line for line in done.stdout.splitlines() if "records sent" in line and "99.9th" in line]
    if done.returncode != 0 or not summary:
        raise RuntimeError(f"ProducerPerformance failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(summary[-1].split(" records/sec")[0].rsplit(",", 1)[1]) * len(RECORD) / 1e6


def bench_wire(workdir: Path, sizes: Sizes) -> dict[str, float]:
    from exactly.app.testing import broker as served

    records = 20_000 if sizes is QUICK else 150_000
    variants = {"idempotent": (2, False), "TV1 transactional, a transaction per 100 ms": (1, True),
                "TV2 transactional, a transaction per 100 ms": (2, True)}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    with served(workdir / "wire-tv1", **{"transaction.version": 1}) as tv1, \
            served(workdir / "wire-tv2", **{"transaction.version": 2}) as tv2:
        servers = {1: tv1, 2: tv2}
        for trial in range(max(sizes.trials - 1, 1)):
            for n, (name, (version, transactional)) in enumerate(variants.items()):
                server = servers[version]
                topic = f"wire-{trial}-{n}"
                server.broker.create_topic(topic, partitions=2)
                rates[name].append(perf_test(server.bootstrap, topic, records,
                                             f"wire-{trial}-{n}" if transactional else None))
    base = statistics.median(rates["idempotent"])
    print(f"\n[4] wire: Kafka 4.4's Java producer (ProducerPerformance), {records:,} x 1 KiB, acks=all, 2 partitions")
    results = {}
    for name in variants:
        rate = statistics.median(rates[name])
        results[name] = rate
        print(f"  {name:<45} {rate:8.2f} MB/s  ({rate / base:6.1%} of idempotent)"
              f"  [{min(rates[name]):.2f}..{max(rates[name]):.2f}]")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for checking the script")
    parser.add_argument("--wire", action="store_true", help="only [4]: Kafka's Java producer over the wire")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    workdir = args.workdir / f"txn-{datetime.datetime.now():%H%M%S}"
    workdir.mkdir(parents=True)
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python bench/bench_transactions.py{' --quick' if args.quick else ''}"
          f"{' --wire' if args.wire else ''}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} on {platform.platform()}")
    if args.wire:
        try:
            bench_wire(workdir, sizes)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    try:
        throughput = bench_throughput(workdir, sizes)
        startup = bench_startup(workdir, sizes)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = throughput["ratio at 100 ms"]
    print("\nsummary:")
    print(f"  [{'  MET  ' if ratio >= THROUGHPUT_GOAL else 'NOT MET'}] TV2 transactional (100 ms) >= 95% "
          f"of idempotent: {ratio:.1%} (TV1: {throughput['TV1 ratio at 100 ms']:.1%})")
    print(f"  [{'  MET  ' if startup < STARTUP_GOAL_S else 'NOT MET'}] coordinator start with "
          f"{sizes.transactional_ids:,} ids < 2 s: {startup:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
