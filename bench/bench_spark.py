#!/usr/bin/env python3
"""Spark benchmark: the ``exactly`` data source and sink against ``exactly serve``, in one run.

    .venv/bin/python bench/bench_spark.py            # full run (a few minutes)
    .venv/bin/python bench/bench_spark.py --quick    # smaller sizes (about a minute)

What it measures (the broker is a separate process, ``run.py``, as ``make run`` starts
it; Spark is ``local[2]``; every figure is the median of its trials):

1. read  -- a topic of 1M records (100-byte values, 10-byte keys, 4 partitions, written
            by confluent-kafka in transactions) read to its end, read_committed:
            * by one confluent-kafka consumer in one process (``consume(1000)``, each
              record's key and value touched): records/s;
            * by Spark through the ``exactly`` source, every column materialised
              (``write.format("noop")``): records/s, after one warm-up read.
2. sink  -- the same streaming query (the ``exactly`` source with ``maxOffsetsPerTrigger``,
            ``availableNow``: many small micro-batches) into Spark's ``noop`` sink and into
            the exactly-once ``exactly`` sink, after one warm-up query into each; each
            micro-batch's ``triggerExecution`` time from the query's progress: the sink's
            overhead is the difference of the medians (``addBatch``, the write and the
            sink's commit, is printed beside it).

Goals (the issue's): the data source reads at >= 50% of the single-process client's
rate on 2 cores; the exactly-once sink adds <= 200 ms per micro-batch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402

from bench_kafka import PARTITIONS, Served, create_topic  # noqa: E402

VALUE = os.urandom(100)
GOAL_READ_VS_CLIENT = 0.50
GOAL_SINK_OVERHEAD_MS = 200


@dataclass(frozen=True)
class Sizes:
    records: int        # in the read topic
    trials: int
    batches: int        # micro-batches per streaming trial
    batch_records: int  # records per micro-batch


FULL = Sizes(records=1_000_000, trials=3, batches=30, batch_records=100)
QUICK = Sizes(records=100_000, trials=1, batches=8, batch_records=100)


def fill(bootstrap: str, topic: str, records: int) -> None:
    """``records`` records in committed transactions of 100,000 (what a real feed looks like)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-fill-{topic}",
                         "linger.ms": 20, "batch.size": 1_000_000, "broker.address.family": "v4"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, key=b"key-%06d" % (i % 1_000_000), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if (i + 1) % 100_000 == 0:
            producer.commit_transaction(120)
            producer.begin_transaction()
    producer.commit_transaction(120)


def client_read(bootstrap: str, topic: str) -> tuple[int, float]:
    """(records, records/s) of one fresh read_committed consumer reading ``topic`` to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-client",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "broker.address.family": "v4",
                         "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    received, touched, at_end = 0, 0, set()
    start = time.perf_counter()
    while len(at_end) < PARTITIONS:
        for message in consumer.consume(1000, 0.05):
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            received += 1
            touched += len(message.key()) + len(message.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    return received, received / elapsed


def spark_reader(spark, bootstrap: str, topic: str):
    return (spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load())


def spark_read(spark, bootstrap: str, topic: str, records: int) -> float:
    """records/s of Spark reading the ``records`` of ``topic`` through the source, every
    column materialised (a new DataFrame each time: one keeps the ranges it planned)."""
    start = time.perf_counter()
    spark_reader(spark, bootstrap, topic).write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - start)


@dataclass(frozen=True)
class Batch:
    """One micro-batch's times from the query's progress (ms)."""

    total: float    # triggerExecution: planning, the offset log, the write, the commit log
    add_batch: float  # addBatch: the write, the sink's commit included


def micro_batches(spark, bootstrap: str, topic: str, sink: str, checkpoint: Path, batch_records: int,
                  output: str) -> list[Batch]:
    """The micro-batches of an availableNow copy of ``topic`` into ``sink``."""
    stream = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(batch_records)).load()
              .select("key", "value"))
    writer = stream.writeStream.format(sink).option("checkpointLocation", str(checkpoint))
    if sink == "exactly":
        writer = writer.option("kafka.bootstrap.servers", bootstrap).option("topic", output)
    query = writer.trigger(availableNow=True).start()
    try:
        if not query.awaitTermination(600):
            raise RuntimeError(f"the {sink} query did not finish in 600 s")
    finally:
        query.stop()
    return [Batch(p["durationMs"]["triggerExecution"], p["durationMs"]["addBatch"])
            for p in query.recentProgress if p["numInputRows"] > 0]


def median(batches: list[Batch], field: str = "total") -> float:
    return statistics.median(getattr(batch, field) for batch in batches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: checks the script, not figures")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    workdir = args.workdir / f"spark-{os.getpid()}"
    workdir.mkdir(parents=True)
    print(f"date:    {time.strftime('%Y-%m-%dT%H:%M:%S')}\ncommand: python bench/bench_spark.py"
          f"{' --quick' if args.quick else ''}\nsizes:   {sizes.records} records of {len(VALUE)} B in "
          f"{PARTITIONS} partitions, {sizes.trials} trial(s); {sizes.batches} micro-batches of "
          f"{sizes.batch_records} records\n", flush=True)
    from exactly.app.spark.session import spark_session

    spark = spark_session("bench-spark")
    served = Served(workdir / "data")
    try:
        bootstrap = served.bootstrap
        for topic in ("read", "stream", "stream-out"):
            create_topic(bootstrap, topic)
        fill(bootstrap, "read", sizes.records)
        fill(bootstrap, "stream", sizes.batches * sizes.batch_records)
        counted = spark_reader(spark, bootstrap, "read").count()  # warm-up: Python workers, connections
        if counted != sizes.records:
            raise RuntimeError(f"Spark read {counted} records of {sizes.records}")
        for sink in ("noop", "exactly"):  # warm-up: each sink's first query
            micro_batches(spark, bootstrap, "stream", sink, workdir / f"ck-warm-{sink}", sizes.batch_records,
                          "stream-out")
        clients, sparks = [], []
        for trial in range(sizes.trials):
            records, rate = client_read(bootstrap, "read")
            if records != sizes.records:
                raise RuntimeError(f"the client read {records} records of {sizes.records}")
            clients.append(rate)
            sparks.append(spark_read(spark, bootstrap, "read", sizes.records))
            print(f"  read trial {trial + 1}: confluent-kafka {clients[-1]:,.0f} records/s, "
                  f"Spark exactly source {sparks[-1]:,.0f} records/s", flush=True)
        noop, exactly = [], []
        for trial in range(sizes.trials):
            noop += micro_batches(spark, bootstrap, "stream", "noop", workdir / f"ck-noop-{trial}",
                                  sizes.batch_records, "stream-out")
            exactly += micro_batches(spark, bootstrap, "stream", "exactly", workdir / f"ck-exactly-{trial}",
                                     sizes.batch_records, "stream-out")
            print(f"  sink trial {trial + 1}: noop median {median(noop):.0f} ms per micro-batch, "
                  f"exactly median {median(exactly):.0f} ms ({len(exactly)} batches so far)", flush=True)
    finally:
        served.close()
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    client, source = statistics.median(clients), statistics.median(sparks)
    noop_ms, exactly_ms = median(noop), median(exactly)
    print(f"\n[1] read {sizes.records:,} records, read_committed (median of {sizes.trials})")
    print(f"  confluent-kafka, one process    {client:12,.0f} records/s  (100.0%)")
    print(f"  Spark, the exactly source       {source:12,.0f} records/s  ({source / client:6.1%} of the client)")
    print(f"\n[2] micro-batches of {sizes.batch_records} records ({len(noop)} and {len(exactly)} batches, medians)")
    print(f"  noop sink                       {noop_ms:8.0f} ms per micro-batch  (addBatch {median(noop, 'add_batch'):.0f} ms)")
    print(f"  exactly sink (exactly once)     {exactly_ms:8.0f} ms per micro-batch  (addBatch "
          f"{median(exactly, 'add_batch'):.0f} ms; +{exactly_ms - noop_ms:.0f} ms, {exactly_ms / noop_ms:.2f}x)")
    goals = [(f"Spark read >= {GOAL_READ_VS_CLIENT:.0%} of confluent-kafka", f"{source / client:.1%}",
              source / client >= GOAL_READ_VS_CLIENT),
             (f"exactly-once sink adds <= {GOAL_SINK_OVERHEAD_MS} ms per micro-batch",
              f"{exactly_ms - noop_ms:+.0f} ms", exactly_ms - noop_ms <= GOAL_SINK_OVERHEAD_MS)]
    print("\nsummary:")
    for name, figure, met in goals:
        print(f"  [{'  MET  ' if met else 'NOT MET'}] {name}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
