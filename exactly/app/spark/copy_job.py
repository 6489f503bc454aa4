"""The streaming pipeline: copy an input topic to an output topic, exactly once.

    python -m exactly.app.spark.copy_job --bootstrap 127.0.0.1:9092 --input orders \\
        --output orders-json --checkpoint /tmp/copy-ck [--seed 1000] [--available-now]

It reads ``--input`` read_committed with the ``exactly`` source (aborted and open
transactions are never read), turns each record into JSON carrying where it came
from -- ``{"partition": 0, "offset": 17, "value": "RECORD-17"}`` (the value
upper-cased) -- keeps its key, writes it to the same partition of ``--output``
through the exactly-once sink, and prints one line per micro-batch::

    batch 3: 40 in, 40 out, offsets orders 0:60 1:60, sink 212 ms, batch 1834 ms

Restarted with the same ``--checkpoint`` it continues where it stopped, whatever
killed it: no output record is lost or written twice. ``--seed N`` first writes N
demo records to an empty input (in transactions of 10, every fourth one aborted) so
the job has something to do. ``--available-now`` exits once it has caught up;
otherwise it runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from exactly.app.spark.kafka_admin import KafkaAdmin

#: seeded records per transaction, and every how many transactions one is aborted
SEED_TXN_SIZE, SEED_ABORT_EVERY = 10, 4


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m exactly.app.spark.copy_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="kafka.bootstrap.servers")
    parser.add_argument("--input", required=True, help="the topic to read (read_committed)")
    parser.add_argument("--output", required=True, help="the topic to write exactly once")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--seed", type=int, default=0, metavar="N",
                        help="first write N demo records to the input topic if it is empty")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of topics this job creates")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N",
                        help="read at most N records per micro-batch")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there, then exit (default: run until Ctrl-C)")
    parser.add_argument("--trigger-seconds", type=float, default=1.0,
                        help="how often a running job looks for new input")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    partitions = prepare_topics(KafkaAdmin(args.bootstrap), args)
    if args.seed:
        seeded = seed(args.bootstrap, args.input, args.seed)
        print(f"seeded {args.input}: {seeded}" if seeded else f"{args.input} has records already: not seeded",
              flush=True)
    from exactly.app.spark.session import spark_session

    spark = spark_session("exactly-copy-job")
    query = start(spark, args, partitions)
    print(f"copying {args.input} -> {args.output} (query {query.id}, checkpoint {args.checkpoint})", flush=True)
    try:
        follow(query)
    except KeyboardInterrupt:
        print("stopping", flush=True)
        query.stop()
    finally:
        spark.stop()
    return 0


def prepare_topics(admin: KafkaAdmin, args: argparse.Namespace) -> int:
    """Create missing topics (the output with the input's partition count); the
    output's partition count."""
    admin.create_topic(args.input, args.partitions)
    admin.create_topic(args.output, admin.partition_count(args.input))
    return admin.partition_count(args.output)


def seed(bootstrap: str, topic: str, count: int) -> str:
    """Write ``count`` committed records ("record-<i>", key "key-record-<i>") to an empty
    ``topic``, in transactions with aborted ones between them; '' if it had records."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "exactly-copy-job-seed"})
    metadata = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    if any(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in metadata):
        consumer.close()
        return ""
    consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"exactly-copy-job-seed-{topic}"})
    producer.init_transactions(30)
    committed = aborted = transactions = 0
    while committed < count:
        abort = transactions % SEED_ABORT_EVERY == SEED_ABORT_EVERY - 1
        producer.begin_transaction()
        for _ in range(SEED_TXN_SIZE if abort else min(SEED_TXN_SIZE, count - committed)):
            value = f"aborted-{aborted}" if abort else f"record-{committed}"
            producer.produce(topic, key=f"key-{value}", value=value)
            aborted, committed = aborted + abort, committed + (not abort)
        if abort:
            # abort_transaction drops what librdkafka has not sent yet: flush first, so
            # the aborted records and their ABORT markers really are in the input
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
        transactions += 1
    return f"{committed} committed records, {aborted} aborted"


def start(spark: Any, args: argparse.Namespace, output_partitions: int) -> Any:
    """The streaming query: read, transform (:func:`transform`), write exactly once."""
    reader = (spark.readStream.format("exactly")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest"))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    writer = (transform(reader.load(), output_partitions).writeStream.format("exactly")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.start()


def transform(records: Any, output_partitions: int) -> Any:
    """Each input record as JSON with its partition, offset and upper-cased value,
    keyed as it was, to the same partition of the output (mod its partition count)."""
    from pyspark.sql import functions as F

    return records.select(
        F.col("key"),
        F.to_json(F.struct(F.col("partition"), F.col("offset"),
                           F.upper(F.col("value").cast("string")).alias("value"))).alias("value"),
        (F.col("partition") % output_partitions).alias("partition"))


def expected_output(partition: int, offset: int, value: bytes) -> bytes:
    """What :func:`transform` makes of one input record (the tests' and readers' check)."""
    return json.dumps({"partition": partition, "offset": offset, "value": value.decode().upper()},
                      separators=(",", ":")).encode()


def follow(query: Any) -> None:
    """Print a progress line per finished micro-batch until the query ends."""
    printed = -1
    while True:
        finished = query.awaitTermination(0.5)
        for progress in query.recentProgress:
            if progress["batchId"] > printed:
                print(progress_line(progress), flush=True)
                printed = progress["batchId"]
        if finished:
            if query.exception() is not None:
                raise SystemExit(f"the query failed: {query.exception()}")
            return


def progress_line(progress: dict) -> str:
    """``batch 3: 40 in, 40 out, offsets in 0:60 1:60, sink 212 ms, batch 1834 ms``."""
    rows_in = progress["numInputRows"]
    rows_out = progress.get("sink", {}).get("numOutputRows", -1)
    offsets = []
    for source in progress.get("sources", []):
        end = source.get("endOffset") or {}
        if isinstance(end, str):
            end = json.loads(end)
        for topic, by_partition in sorted(end.items()):
            offsets.append(topic + " " + " ".join(f"{p}:{o}" for p, o in sorted(by_partition.items(),
                                                                               key=lambda po: int(po[0]))))
    durations = progress.get("durationMs", {})
    return (f"batch {progress['batchId']}: {rows_in} in, {rows_out if rows_out >= 0 else rows_in} out, "
            f"offsets {', '.join(offsets) or '-'}, sink {durations.get('addBatch', 0)} ms, "
            f"batch {durations.get('triggerExecution', 0)} ms")


if __name__ == "__main__":
    sys.exit(main())
