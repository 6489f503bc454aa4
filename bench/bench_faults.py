#!/usr/bin/env python3
"""What the fault check costs a request: throughput with no fault installed and with
one fault that matches nothing the workload sends, as a ratio.

    .venv/bin/python bench/bench_faults.py            # 5 trials of 4000 requests each
    .venv/bin/python bench/bench_faults.py --quick    # 3 trials of 1000

The workload is the cheapest request there is to make the check as visible as it can
be: Metadata v8 for one topic, pipelined 16 deep on one raw connection to an
in-process broker (``tests``' ``KafkaBroker``: the listener on the engine's loop, no
fsync on the path). Trials of the three settings alternate, so drift on a shared
machine touches each alike; every figure is the median of its trials. With no fault
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

from tests.kafka_support import KafkaBroker, raw_connection  # noqa: E402

METADATA, VERSION = 3, 8
DEPTH = 16
TOPIC = "bench"


def requests_per_second(port: int, count: int) -> float:
    """``count`` Metadata requests, ``DEPTH`` in flight; requests answered per second."""
    connection = raw_connection(port, "bench-faults")
    body = {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}
    try:
        started = time.perf_counter()
        sent = received = 0
        while received < count:
            while sent < count and sent - received < DEPTH:
                connection.send(METADATA, VERSION, body)
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
    trials, count = (3, 1000) if args.quick else (5, 4000)
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
    base = statistics.median(figures["none"])
    print(f"Metadata v8, {DEPTH} in flight, {trials} trials of {count} requests (median)")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"  faults installed: {name:<17} {median:9.0f} requests/s  ratio {median / base:.3f}  "
              f"(trials: {', '.join(f'{v:.0f}' for v in values)})")
    print(f"  the check alone (no fault installed): {check_s * 1e9:.0f} ns = {check_s * base:.5%} of a request")


if __name__ == "__main__":
    main()
