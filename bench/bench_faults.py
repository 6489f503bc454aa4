#!/usr/bin/env python3
"""What the fault check costs a request: throughput with no fault installed and with
one fault that matches nothing the workload sends, as a ratio.

    .venv/bin/python bench/bench_faults.py            # 21 pairs of trials of 1000 requests
    .venv/bin/python bench/bench_faults.py --quick    # 5 pairs of 500

The workload is the cheapest request there is to make the check as visible as it can
be: Metadata v8 for one topic, pipelined 16 deep on one raw connection to an
in-process broker (``tests``' ``KafkaBroker``: the listener on the engine's loop, no
fsync on the path). The two settings alternate in short trials, and the ratio is the
median of the ratios of adjacent pairs, so the load of a shared machine touches both
sides of a pair alike. With no fault
installed the listener checks one attribute (``Faults.installed``, an empty tuple):
that check is also timed alone (``timeit``) and set against the time of a request,
since no run without the check exists to compare with. With one fault installed the
listener also extracts the request's facts and tries the fault.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kio.index import load_request_schema  # noqa: E402

from exactly.app.kafka.fault_shapes import facts  # noqa: E402
from exactly.app.kafka.wire import build  # noqa: E402
from tests.kafka_support import KafkaBroker, raw_connection  # noqa: E402

METADATA, VERSION = 3, 8
DEPTH = 16
TOPIC = "bench"
BODY = {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}


def requests_per_second(port: int, count: int) -> float:
    """``count`` Metadata requests, ``DEPTH`` in flight; requests answered per second."""
    connection = raw_connection(port, "bench-faults")
    try:
        started = time.perf_counter()
        sent = received = 0
        while received < count:
            while sent < count and sent - received < DEPTH:
                connection.send(METADATA, VERSION, BODY)
                sent += 1
            connection.receive(METADATA, VERSION)
            received += 1
        return count / (time.perf_counter() - started)
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    trials, count = (5, 500) if args.quick else (21, 1000)
    with tempfile.TemporaryDirectory() as tmp, KafkaBroker(Path(tmp) / "data") as kafka:
        kafka.broker.create_topic(TOPIC, 1)
        requests_per_second(kafka.port, count // 4)  # warm: imports, caches, the loop
        figures: dict[str, list[float]] = {"none": [], "one non-matching": []}
        for _ in range(trials):
            figures["none"].append(requests_per_second(kafka.port, count))
            fault = kafka.broker.faults.add(api="EndTxn", error="NOT_COORDINATOR")
            figures["one non-matching"].append(requests_per_second(kafka.port, count))
            fault.remove()
        faults = kafka.broker.faults
        check_s = min(timeit.repeat(lambda: faults.installed, number=100_000, repeat=5)) / 100_000
        faults.add(api="EndTxn", error="NOT_COORDINATOR")
        request = build(load_request_schema(METADATA, VERSION), BODY)
        try_s = min(timeit.repeat(lambda: faults.fire(facts(METADATA, "bench", "User:ANONYMOUS", request)),
                                  number=10_000, repeat=5)) / 10_000
    base = statistics.median(figures["none"])
    ratios = [with_one / without for without, with_one in zip(figures["none"], figures["one non-matching"])]
    print(f"Metadata v8, {DEPTH} in flight, {trials} pairs of trials of {count} requests")
    for name, values in figures.items():
        print(f"  faults installed: {name:<17} {statistics.median(values):9.0f} requests/s (median)")
    print(f"  one non-matching fault / none: {statistics.median(ratios):.3f} (median of the pairs' ratios; "
          f"quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}-{statistics.quantiles(ratios, n=4)[2]:.3f})")
    print(f"  the check alone (no fault installed): {check_s * 1e9:.0f} ns = {check_s * base:.5%} of a request")
    print(f"  facts + trying one non-matching fault alone: {try_s * 1e6:.1f} us = {try_s * base:.3%} of a request")


if __name__ == "__main__":
    main()
