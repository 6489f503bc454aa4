#!/usr/bin/env python3
"""Kafka wire-protocol benchmark: confluent-kafka against ``exactly serve``, in one run on one disk.

    .venv/bin/python bench/bench_kafka.py            # full run (a few minutes)
    .venv/bin/python bench/bench_kafka.py --quick    # smaller sizes (well under a minute)

What it measures (1 KiB values throughout; MB is 10**6 bytes; every figure is the
median of its trials):

1. raw      -- the disk's fdatasync bandwidth: 100 KiB appends, fdatasync after each
               (the durability unit of an acks=all append), as bench_storage.py does.
2. codec    -- kio on the hot paths: decoding a Produce v9 request and encoding a Fetch
               v11 response, per MB of records.
3. wire     -- the same client workloads against the broker (a separate process,
               ``run.py``) and against librdkafka's built-in mock cluster
               (``test.mock.num.brokers``: in memory, no fsync, no read_committed
               filtering; also a process of its own) as a ceiling:
               * idempotent produce, acks=all (throughput; delivery latency p50/p99);
               * transactional produce committing every 100 ms (throughput; commit
                 latency p50/p99);
               * consume of the transactional topic, read_committed and read_uncommitted.

Goals (the issue's): idempotent produce >= 50% of raw fdatasync bandwidth;
transactional at 100 ms >= 95% of idempotent; read_committed >= 90% of read_uncommitted.
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
PARTITIONS = 4
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


class Mock:
    """librdkafka's in-memory mock cluster, in a process of its own (as the broker is),
    kept alive by the client that owns it until its stdin closes."""

    SCRIPT = ("import sys; from confluent_kafka import Producer; owner = Producer({'test.mock.num.brokers': 1}); "
              "b = next(iter(owner.list_topics(timeout=10).brokers.values())); "
              "print(f'{b.host}:{b.port}', flush=True); sys.stdin.read()")

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", self.SCRIPT], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.bootstrap = self.process.stdout.readline().strip()
        if not self.bootstrap:
            raise RuntimeError("the mock cluster did not start")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


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


def workloads(bootstrap: str, sizes: Sizes, label: str, create_topics: bool) -> dict[str, list]:
    """Every trial of every workload against one cluster, interleaved, after a warm-up
    (connections, the broker's first requests of each kind). The mock cluster creates
    topics on first use, with 4 partitions."""
    results: dict[str, list] = {"idempotent": [], "transactional": [], "read_committed": [],
                                "read_uncommitted": [], "produce_latency": [], "commit_latency": []}
    topics = ["warm-up"] + [f"{kind}-{trial}" for trial in range(sizes.trials) for kind in ("idem", "txn")]
    for topic in topics if create_topics else ():
        create_topic(bootstrap, topic)
    produce(bootstrap, "warm-up", 1000, transactional_id="warm-up")
    consume(bootstrap, "warm-up", "read_committed")
    for trial in range(sizes.trials):
        rate, latencies = produce(bootstrap, f"idem-{trial}", sizes.messages)
        results["idempotent"].append(rate)
        results["produce_latency"] += latencies
        rate, latencies = produce(bootstrap, f"txn-{trial}", sizes.messages, transactional_id=f"bench-{trial}")
        results["transactional"].append(rate)
        results["commit_latency"] += latencies
        results["read_uncommitted"].append(consume(bootstrap, f"txn-{trial}", "read_uncommitted"))
        results["read_committed"].append(consume(bootstrap, f"txn-{trial}", "read_committed"))
        print(f"  {label} trial {trial + 1}: idempotent {results['idempotent'][-1]:.1f} MB/s, transactional "
              f"{results['transactional'][-1]:.1f} MB/s, read_committed {results['read_committed'][-1]:.1f} MB/s, "
              f"read_uncommitted {results['read_uncommitted'][-1]:.1f} MB/s", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
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
    try:
        raw = bench_raw(workdir, sizes)
        print(f"[1] raw fdatasync bandwidth (100 KiB per fdatasync): {raw:.1f} MB/s\n", flush=True)
        decode_us, encode_us = bench_codec()
        print(f"[2] kio: Produce v9 request decode {decode_us:.1f} us/MB, "
              f"Fetch v11 response encode {encode_us:.1f} us/MB\n", flush=True)
        print("[3] confluent-kafka over the wire", flush=True)
        served = Served(workdir / "data")
        try:
            ours = workloads(served.bootstrap, sizes, "exactly", create_topics=True)
        finally:
            served.close()
        mock = Mock()
        try:
            ceiling = workloads(mock.bootstrap, sizes, "mock", create_topics=False)
        finally:
            mock.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def med(results: dict[str, list], key: str) -> float:
        return statistics.median(results[key])

    print()
    for key in ("idempotent", "transactional", "read_committed", "read_uncommitted"):
        print(f"  {key:<18} exactly {med(ours, key):8.1f} MB/s   mock {med(ceiling, key):8.1f} MB/s   "
              f"ratio {med(ours, key) / med(ceiling, key):6.1%}")
    for key, what in (("produce_latency", "delivery latency"), ("commit_latency", "commit_transaction")):
        print(f"  {what:<18} exactly p50 {percentile(ours[key], .5) * 1000:7.2f} ms  "
              f"p99 {percentile(ours[key], .99) * 1000:7.2f} ms   mock p50 {percentile(ceiling[key], .5) * 1000:7.2f} ms  "
              f"p99 {percentile(ceiling[key], .99) * 1000:7.2f} ms")
    wire_us_per_mb = 1e6 / med(ours, "idempotent")
    print(f"  kio decode share of the idempotent produce path: {decode_us / wire_us_per_mb:.2%}; "
          f"encode share of the read_uncommitted path: {encode_us / (1e6 / med(ours, 'read_uncommitted')):.2%}")
    goals = [
        ("idempotent produce >= 50% of raw fdatasync bandwidth", med(ours, "idempotent") / raw, GOAL_PRODUCE_VS_DISK),
        ("transactional (100 ms) >= 95% of idempotent", med(ours, "transactional") / med(ours, "idempotent"),
         GOAL_TXN_VS_IDEMPOTENT),
        ("read_committed >= 90% of read_uncommitted", med(ours, "read_committed") / med(ours, "read_uncommitted"),
         GOAL_COMMITTED_VS_UNCOMMITTED)]
    print("\nsummary:")
    for name, ratio, goal in goals:
        print(f"  [{'  MET  ' if ratio >= goal else 'NOT MET'}] {name}: {ratio:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
