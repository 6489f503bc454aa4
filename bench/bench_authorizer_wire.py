#!/usr/bin/env python3
"""Produce and fetch throughput on the Kafka port with the authorizer on and 1,000 ACLs,
against the same broker without an authorizer (the Security issue's goal: within 5%).

    .venv/bin/python bench/bench_authorizer_wire.py           # a few minutes
    .venv/bin/python bench/bench_authorizer_wire.py --quick   # for checking the script

One broker per configuration, in this process (the listener on its own loop, as
``exactly serve`` runs it), confluent-kafka as the client: an idempotent producer
(acks=all, 1 KiB values, 4 partitions) and a read_uncommitted consumer reading it all
back. With the authorizer on, the broker holds ``bench_authorizer.py``'s 1,000 ACLs plus
the three the client needs (Write and Read on the ``bench-`` topic prefix, Read on the
group), so every Produce partition, Fetch partition and Metadata topic is checked
against them.

The question is a difference of a few percent on a shared machine, so the design is
what can answer it (issue 29, item 7): each configuration first runs one untimed
warm-up round (the process's cold start -- imports, the first broker, the client
library's first connection -- is paid there, not by whichever configuration comes
first); then paired rounds, the two configurations back to back in each, the order
alternating; each pair gives one ratio on/off, so a drift of the machine's load over the
run hits both sides of a pair alike. The figure is the mean of the pairs' ratios with a
95% confidence interval (a seeded bootstrap of the pairs), and the verdict says whether
the interval excludes a cost above 5%.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

from exactly.app import Broker  # noqa: E402
from exactly.app.engine.scheduler import mirror_round  # noqa: E402
from exactly.app.kafka import attach  # noqa: E402
from exactly.app.listeners import bind  # noqa: E402
from exactly.app.security.acl import AclBinding, AclOperation, PatternType, ResourceType  # noqa: E402
from bench_authorizer import binding, bindings  # noqa: E402

VALUE = os.urandom(1024)
PARTITIONS = 4
STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}


def client_acls() -> list[AclBinding]:
    """What the benchmark's client (User:ANONYMOUS) needs."""
    client = "User:ANONYMOUS"
    return [binding(ResourceType.TOPIC, "bench-", PatternType.PREFIXED, client, AclOperation.WRITE),
            binding(ResourceType.TOPIC, "bench-", PatternType.PREFIXED, client, AclOperation.READ),
            binding(ResourceType.GROUP, "bench", PatternType.LITERAL, client, AclOperation.READ)]


def run_round(data_dir: Path, authorizer: bool, messages: int) -> tuple[float, float]:
    """(produce MB/s, fetch MB/s) of one broker."""
    broker = Broker(data_dir, **(STANDARD if authorizer else {}))
    sock = bind("127.0.0.1", 0, "Kafka")
    listener = attach(broker.engine, sock)
    try:
        engine = broker.engine
        if authorizer:
            acls = bindings() + client_acls()
            assert engine.call(engine.access.create_acls, acls) == [None] * len(acls)
        engine.call(engine.topics.create_topic, "bench-topic", PARTITIONS)
        # The SQLite mirror catches up before the timing: its first round after a bulk ACL
        # change writes a row per ACL on the scheduler's thread, and that -- not the
        # authorizer -- is what a fetch timed during it paid (-32% with 1,003 ACLs, -4% with 3)
        mirror_round(broker.mirror)
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"
        return produce(bootstrap, messages), consume(bootstrap, messages)
    finally:
        listener.close()
        broker.close()
        sock.close()


def produce(bootstrap: str, messages: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failed: list = []
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce("bench-topic", VALUE, partition=i % PARTITIONS,
                                 on_delivery=lambda e, _: e and failed.append(e))
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0 and not failed, failed[:3]
    return messages * len(VALUE) / (time.perf_counter() - start) / 1e6


def consume(bootstrap: str, messages: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 * 1024 * 1024})
    consumer.assign([TopicPartition("bench-topic", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    read, start = 0, time.perf_counter()
    deadline = start + 120
    while read < messages:
        assert time.perf_counter() < deadline, f"read {read} of {messages}"
        for message in consumer.consume(1000, 1.0):
            assert message.error() is None, message.error()
            read += 1
    seconds = time.perf_counter() - start
    consumer.close()
    return messages * len(VALUE) / seconds / 1e6


def confidence_interval(ratios: list[float], resamples: int = 10_000, seed: int = 29,
                        statistic: Callable[[list[float]], float] = statistics.fmean) -> tuple[float, float]:
    """95% bootstrap (percentile) interval of the ``statistic`` (the mean) of ``ratios``,
    seeded: the same figures give the same interval."""
    rng = random.Random(seed)
    means = sorted(statistic(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--messages", type=int, default=15_000)
    args = parser.parse_args()
    messages, pairs = (1_000, 2) if args.quick else (args.messages, args.pairs)
    ratios: list[tuple[float, float]] = []
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as work:
        for authorizer in (False, True):  # warm-up, untimed
            run_round(Path(work) / f"warm-{authorizer}", authorizer, messages)
        for n in range(pairs):
            order = (False, True) if n % 2 == 0 else (True, False)
            pair = {authorizer: run_round(Path(work) / f"{n}-{authorizer}", authorizer, messages)
                    for authorizer in order}
            for authorizer, figure in pair.items():
                figures[authorizer].append(figure)
            ratios.append((pair[True][0] / pair[False][0], pair[True][1] / pair[False][1]))
    print(f"{messages} x 1 KiB, {PARTITIONS} partitions, a warm-up round each, then {pairs} paired rounds "
          f"(order alternating); MB/s medians off / on (1,003 ACLs); on/off: mean of the pairs' ratios, "
          f"95% bootstrap CI")
    for i, what in enumerate(("idempotent produce, acks=all", "fetch, read_uncommitted")):
        off = statistics.median(f[i] for f in figures[False])
        on = statistics.median(f[i] for f in figures[True])
        pair_ratios = [r[i] - 1 for r in ratios]
        low, high = confidence_interval(pair_ratios)
        verdict = ("within 5%" if low > -0.05 else "a cost above 5% not excluded")
        print(f"  {what:32s} {off:7.1f} / {on:7.1f}   {statistics.fmean(pair_ratios):+.1%} "
              f"[{low:+.1%}, {high:+.1%}]  {verdict}")


if __name__ == "__main__":
    main()
