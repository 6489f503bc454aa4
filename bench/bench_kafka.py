#!/usr/bin/env python3
"""Kafka wire-protocol benchmark: confluent-kafka and Kafka's own producer-perf-test against
``exactly serve`` and against Apache Kafka itself, on one disk, in one run.

    .venv/bin/python bench/bench_kafka.py            # full run (about ten minutes)
    .venv/bin/python bench/bench_kafka.py --quick    # smaller sizes (a few minutes: three brokers start)

What it measures (1 KiB values throughout; MB is 10**6 bytes; every figure is the
median of its trials):

1. raw      -- the disk's fdatasync bandwidth: 100 KiB appends, fdatasync after each
               (the durability unit of an acks=all append), as bench_storage.py does.
2. codec    -- kio on the hot paths: decoding a Produce v9 request and encoding a Fetch
               v11 response, per MB of records.
3. wire     -- the same confluent-kafka workloads, 16 partitions, against three brokers,
               trial by trial in turn (so the machine's drift touches all alike): Exactly
               (``run.py``, a process of its own), Apache Kafka at the version
               tests/kafka/pom.xml pins with its default flush policy (durability from
               replication: no fsync per write), and the same Kafka with
               ``log.flush.interval.messages=1`` (an fsync per append, as Exactly's acks=all):
               * idempotent produce, acks=all (throughput; delivery latency p50/p99);
               * transactional produce committing every 100 ms (throughput; commit
                 latency p50/p99);
               * consume of the transactional topic, read_committed and read_uncommitted.
4. perf     -- Kafka's ``kafka-producer-perf-test`` (the Java producer: acks=all,
               idempotent; and transactional, a transaction per 100 ms) against the three.

Both Kafkas are one KRaft node (tests/kafka/real_kafka.py) with Kafka's own JVM options
(``kafka-server-start.sh``'s 1 GiB heap, G1). Goals (the issue's): idempotent produce >=
50% of raw fdatasync bandwidth; transactional at 100 ms >= 95% of idempotent;
read_committed >= 90% of read_uncommitted. Ratios to Kafka are recorded, not goals.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.fetch.v11.response import FetchResponse  # noqa: E402
from kio.schema.produce.v9.request import ProduceRequest  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

from exactly.app.kafka.codec import build  # noqa: E402
from bench_storage import raw_write  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

KiB = 1024
MB = 1_000_000
VALUE = os.urandom(KiB)
PARTITIONS = 16
GOAL_PRODUCE_VS_DISK = 0.50
GOAL_TXN_VS_IDEMPOTENT = 0.95
GOAL_COMMITTED_VS_UNCOMMITTED = 0.90


@dataclass(frozen=True)
class Sizes:
    messages: int       # per produce trial
    trials: int
    raw_bytes: int


FULL = Sizes(messages=100_000, trials=3, raw_bytes=128 * 1024 * KiB)
QUICK = Sizes(messages=10_000, trials=1, raw_bytes=16 * 1024 * KiB)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mbps(messages: int, seconds: float) -> float:
    return messages * len(VALUE) / seconds / MB


# -- 1. raw ---------------------------------------------------------------------------------------


def bench_raw(workdir: Path, sizes: Sizes) -> float:
    seconds = [raw_write(workdir / "raw", sizes.raw_bytes, 1, os.fdatasync, VALUE * 100)[0]
               for _ in range(sizes.trials)]
    return sizes.raw_bytes / statistics.median(seconds) / MB


# -- 2. codec --------------------------------------------------------------------------------------


def bench_codec() -> tuple[float, float]:
    """Microseconds per MB of records: Produce v9 request decode, Fetch v11 response encode."""
    batch = encode_batch([SimpleRecord(VALUE) for _ in range(100)])
    produce = build(ProduceRequest, {"acks": -1, "timeout": 30_000, "topic_data": [
        {"name": "t", "partition_data": [{"index": p, "records": batch} for p in range(PARTITIONS)]}]})
    out = io.BytesIO()
    entity_writer(ProduceRequest)(out, produce)
    encoded, read = memoryview(out.getvalue()), entity_reader(ProduceRequest)
    fetch = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": p, "high_watermark": 1, "records": batch * 10} for p in range(PARTITIONS)]}]}
    write = entity_writer(FetchResponse)
    rounds = 500
    start = time.perf_counter()
    for _ in range(rounds):
        read(encoded, 0)
    decode_us = (time.perf_counter() - start) / rounds * 1e6 / (len(batch) * PARTITIONS / MB)
    start = time.perf_counter()
    for _ in range(rounds // 10):
        write(io.BytesIO(), build(FetchResponse, fetch))
    encode_us = (time.perf_counter() - start) / (rounds // 10) * 1e6 / (len(batch) * 10 * PARTITIONS / MB)
    return decode_us, encode_us


# -- 3. wire -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``run.py`` on a fresh data directory, as ``make run`` starts it."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), "--data-dir", str(data_dir), "--kafka-port", str(self.port),
             "--http-port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        for line in self.process.stdout:
            if "Ctrl-C" in line:
                break
        else:
            raise RuntimeError("the broker did not start")
        self.bootstrap = f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: the future needs its client alive
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, messages: int, transactional_id: str | None = None,
            commit_every_s: float = 0.1) -> tuple[float, list[float]]:
    """MB/s, and latencies: of every 10th message's delivery (idempotent), of every
    commit_transaction (transactional). The producer first learns the topic's metadata
    (one record per partition, flushed), so the clock measures the steady state."""
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
              "broker.address.family": "v4"}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    latencies: list[float] = []

    def delivered(error, message) -> None:
        if error is not None:
            raise RuntimeError(error)
        latencies.append(message.latency())

    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce(topic, VALUE, partition=partition)
    if transactional_id:
        producer.commit_transaction(30)
        producer.begin_transaction()
    producer.flush(30)
    start = last_commit = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % PARTITIONS,
                                 on_delivery=delivered if i % 10 == 0 and not transactional_id else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
        if transactional_id and time.perf_counter() - last_commit >= commit_every_s:
            latencies.append(_commit(producer))
            producer.begin_transaction()
            last_commit = time.perf_counter()
    if transactional_id:
        latencies.append(_commit(producer))
    producer.flush(120)
    return mbps(messages, time.perf_counter() - start), latencies


def _commit(producer: Producer) -> float:
    """Seconds one commit_transaction took once everything produced was acknowledged
    (it would flush first; that time is the produce path's, not the commit's)."""
    producer.flush(60)
    start = time.perf_counter()
    producer.commit_transaction(60)
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, isolation_level: str) -> float:
    """MB/s of a fresh consumer reading the whole topic, until the end of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation_level}",
                         "isolation.level": isolation_level, "enable.auto.commit": False,
                         "enable.partition.eof": True, "broker.address.family": "v4",
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    received, at_end = 0, set()
    start = time.perf_counter()
    while len(at_end) < PARTITIONS:
        if time.perf_counter() - start > 300:
            raise RuntimeError(f"{topic}: {received} messages and no end after 300 s")
        for message in consumer.consume(1000, 0.05):  # a short wait: the end is not waited out
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            received += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return mbps(received, elapsed)


#: the brokers of section 3 and 4, in the order each trial visits them
BROKERS = ("exactly", "kafka", "kafka-flush1")
KEYS = ("idempotent", "transactional", "read_committed", "read_uncommitted", "produce_latency", "commit_latency",
        "perf_idempotent", "perf_transactional")


def warm_up(bootstrap: str, messages: int) -> None:
    """Connections, each request's first use, and (for Kafka) the JIT's first compilations."""
    create_topic(bootstrap, "warm-up")
    produce(bootstrap, "warm-up", messages, transactional_id="warm-up")
    consume(bootstrap, "warm-up", "read_committed")


def trial(bootstrap: str, sizes: Sizes, label: str, number: int, results: dict[str, list]) -> None:
    """One trial of every confluent-kafka workload against one broker."""
    for topic in (f"idem-{number}", f"txn-{number}"):
        create_topic(bootstrap, topic)
    rate, latencies = produce(bootstrap, f"idem-{number}", sizes.messages)
    results["idempotent"].append(rate)
    results["produce_latency"] += latencies
    rate, latencies = produce(bootstrap, f"txn-{number}", sizes.messages, transactional_id=f"bench-{number}")
    results["transactional"].append(rate)
    results["commit_latency"] += latencies
    results["read_uncommitted"].append(consume(bootstrap, f"txn-{number}", "read_uncommitted"))
    results["read_committed"].append(consume(bootstrap, f"txn-{number}", "read_committed"))
    print(f"  {label:<12} trial {number + 1}: idempotent {results['idempotent'][-1]:7.1f} MB/s, transactional "
          f"{results['transactional'][-1]:7.1f} MB/s, read_committed {results['read_committed'][-1]:7.1f} MB/s, "
          f"read_uncommitted {results['read_uncommitted'][-1]:7.1f} MB/s", flush=True)


def perf_test(bootstrap: str, sizes: Sizes, label: str, number: int, results: dict[str, list]) -> None:
    """kafka-producer-perf-test (the Java producer) to a topic of its own: acks=all and
    idempotent, then transactional with a transaction per 100 ms."""
    from tests.kafka.real_kafka import run_tool

    for kind, extra in (("idempotent", []), ("transactional", ["--transaction-duration-ms", "100"])):
        topic = f"perf-{kind}-{number}"
        create_topic(bootstrap, topic)
        props = [f"bootstrap.servers={bootstrap}", "acks=all", "enable.idempotence=true"]
        if extra:
            props.append(f"transactional.id=perf-{number}")
        done = run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                        str(sizes.messages), "--record-size", str(KiB), "--throughput", "-1", *extra,
                        "--command-property", *props, timeout=600)
        summary = [line for line in done.stdout.splitlines() if "records sent" in line and "99.9th" in line]
        if done.returncode != 0 or not summary:
            raise RuntimeError(f"producer-perf-test against {label} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        records_per_s = float(summary[-1].split(" records/sec")[0].rsplit(",", 1)[1])
        results[f"perf_{kind}"].append(records_per_s * KiB / MB)
    print(f"  {label:<12} trial {number + 1}: producer-perf-test idempotent {results['perf_idempotent'][-1]:7.1f} MB/s, "
          f"transactional {results['perf_transactional'][-1]:7.1f} MB/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    from tests.kafka.real_kafka import KAFKA_JVM, RealKafka

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: checks the script, not figures")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    workdir = args.workdir / f"kafka-{os.getpid()}"
    workdir.mkdir(parents=True)
    print(f"date:    {time.strftime('%Y-%m-%dT%H:%M:%S')}\ncommand: python bench/bench_kafka.py"
          f"{' --quick' if args.quick else ''}\nsizes:   {sizes.messages} x 1 KiB per produce trial, "
          f"{sizes.trials} trial(s), {PARTITIONS} partitions\n", flush=True)
    results = {broker: {key: [] for key in KEYS} for broker in BROKERS}
    running: list[Any] = []
    try:
        raw = bench_raw(workdir, sizes)
        print(f"[1] raw fdatasync bandwidth (100 KiB per fdatasync): {raw:.1f} MB/s\n", flush=True)
        decode_us, encode_us = bench_codec()
        print(f"[2] kio: Produce v9 request decode {decode_us:.1f} us/MB, "
              f"Fetch v11 response encode {encode_us:.1f} us/MB\n", flush=True)
        running.append(Served(workdir / "exactly"))
        for name, config in (("kafka", {}), ("kafka-flush1", {"log.flush.interval.messages": "1"})):
            running.append(RealKafka(workdir / name, config, jvm=KAFKA_JVM).start())
        bootstraps = dict(zip(BROKERS, (broker.bootstrap for broker in running)))
        for bootstrap in bootstraps.values():
            warm_up(bootstrap, sizes.messages // 5)
        print("[3] confluent-kafka over the wire", flush=True)
        for number in range(sizes.trials):
            for broker, bootstrap in bootstraps.items():
                trial(bootstrap, sizes, broker, number, results[broker])
        print("\n[4] kafka-producer-perf-test (the Java producer)", flush=True)
        for number in range(sizes.trials):
            for broker, bootstrap in bootstraps.items():
                perf_test(bootstrap, sizes, broker, number, results[broker])
    finally:
        for broker in running:
            broker.close() if isinstance(broker, Served) else broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def med(broker: str, key: str) -> float:
        return statistics.median(results[broker][key])

    print()
    for key in ("idempotent", "transactional", "read_committed", "read_uncommitted", "perf_idempotent",
                "perf_transactional"):
        print(f"  {key:<19}" + "".join(f"{broker} {med(broker, key):7.1f} MB/s   " for broker in BROKERS)
              + f"exactly/kafka {med('exactly', key) / med('kafka', key):6.1%}   "
              f"exactly/kafka-flush1 {med('exactly', key) / med('kafka-flush1', key):6.1%}")
    for key, what in (("produce_latency", "delivery latency"), ("commit_latency", "commit_transaction")):
        print(f"  {what:<19}" + "   ".join(
            f"{broker} p50 {percentile(results[broker][key], .5) * 1000:7.2f} ms p99 "
            f"{percentile(results[broker][key], .99) * 1000:7.2f} ms" for broker in BROKERS))
    wire_us_per_mb = 1e6 / med("exactly", "idempotent")
    print(f"  kio decode share of the idempotent produce path: {decode_us / wire_us_per_mb:.2%}; "
          f"encode share of the read_uncommitted path: {encode_us / (1e6 / med('exactly', 'read_uncommitted')):.2%}")
    goals = [
        ("idempotent produce >= 50% of raw fdatasync bandwidth", med("exactly", "idempotent") / raw,
         GOAL_PRODUCE_VS_DISK),
        ("transactional (100 ms) >= 95% of idempotent", med("exactly", "transactional") / med("exactly", "idempotent"),
         GOAL_TXN_VS_IDEMPOTENT),
        ("read_committed >= 90% of read_uncommitted",
         med("exactly", "read_committed") / med("exactly", "read_uncommitted"), GOAL_COMMITTED_VS_UNCOMMITTED)]
    print("\nsummary:")
    for name, ratio, goal in goals:
        print(f"  [{'  MET  ' if ratio >= goal else 'NOT MET'}] {name}: {ratio:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
