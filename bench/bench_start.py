#!/usr/bin/env python3
"""Start-to-first-answer of a broker per test: from entering ``exactly.app.testing.broker()`` to
the first ApiVersions answer on its Kafka port and the first HTTP 200 on its API.

    .venv/bin/python bench/bench_start.py            # 15 warm trials, 3 cold ones
    .venv/bin/python bench/bench_start.py --quick    # a few trials, for checking the script

* warm  -- in a process that has already started one broker (a test suite's every test
           after its first): what the ``exactly_broker`` fixture costs a test;
* cold  -- a new interpreter: imports (the engine, Flask, SQLAlchemy, the wire codec)
           included: what the first test of a run pays once;
* restart -- ``restart(clean=...)`` in place, to the first ApiVersions answer after it (an
           unclean restart in a child process would cost the cold start instead);
* librdkafka's in-process mock cluster (``test.mock.num.brokers=1``, in confluent-kafka's
  wheel), measured here the same way: Producer made -> first metadata answer. It
  answers the Kafka protocol from memory and loses everything on close.

Against the published start times (no Docker here to measure a container ourselves):

* KIP-974 (https://cwiki.apache.org/confluence/display/KAFKA/KIP-974%3A+Docker+Image+for+GraalVM+based+Native+Kafka+Broker):
  a JVM Kafka broker's server start, default configs, ~1150-1200 ms; the GraalVM
  native broker (apache/kafka-native) ~110-140 ms -- the process alone, before any
  container is created, started and waited for by Testcontainers.
* Testcontainers' own maintainers, on a Kafka cluster example's flaky start
  (https://github.com/testcontainers/testcontainers-java/pull/4549): "25s+ just to start
  the container looks really long", a 30 s start-up timeout hit on CI runners; the issue
  this answers (16) puts a Testcontainers Kafka at 10+ s per start.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: ApiVersions v0 with header v1 (api key 18, correlation id 1, client id "bench")
API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"

PUBLISHED = [
    ("Kafka broker on the JVM, server start only (KIP-974)", "1150-1200 ms"),
    ("apache/kafka-native (GraalVM), server start only (KIP-974)", "110-140 ms"),
    ("Testcontainers Kafka, container start (issue 16; PR 4549 saw 25 s+ on CI)", "10 s+"),
]


def first_api_versions(host: str, port: int, deadline: float) -> None:
    """Connect (retrying while refused) and wait for the first ApiVersions answer."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
                (size,) = struct.unpack(">i", _read(sock, 4))
                _read(sock, size)
                return
        except ConnectionRefusedError:
            if time.perf_counter() > deadline:
                raise
            time.sleep(0.001)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed before the answer")
        data += chunk
    return data


def first_http_200(host: str, port: int) -> None:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", "/v3/clusters")
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
    finally:
        connection.close()


def one_start() -> tuple[float, float, float]:
    """Seconds from ``broker()`` entry to the first ApiVersions answer and to the first
    HTTP 200, and the CPU seconds the process spent meanwhile (all its threads): on a
    loaded machine the wall clock measures the load, the CPU time the work."""
    from exactly.app.testing import broker

    started, cpu = time.perf_counter(), time.process_time()
    with broker() as b:
        first_api_versions("127.0.0.1", b.kafka_port, started + 30)
        kafka = time.perf_counter() - started
        first_http_200("127.0.0.1", b.http_port)
        web = time.perf_counter() - started
        cpu = time.process_time() - cpu
    return kafka, web, cpu


def cold_start() -> tuple[float, float, float]:
    """:func:`one_start` in a new interpreter (its imports inside the measured time)."""
    code = ("import sys, time; t = time.perf_counter(); sys.path.insert(0, %r); import bench.bench_start as s; "
            "k, w, c = s.one_start(); d = time.perf_counter() - t - w; print(k + d, w + d, time.process_time())"
            ) % str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def restart(clean: bool, trials: int) -> list[float]:
    """Seconds of ``restart(clean)`` in place, each followed by the first ApiVersions answer."""
    from exactly.app.testing import broker

    took = []
    with broker() as b:
        b.broker.create_topic("t", 1)
        for _ in range(trials):
            started = time.perf_counter()
            b.restart(clean=clean)
            first_api_versions("127.0.0.1", b.kafka_port, started + 30)
            took.append(time.perf_counter() - started)
    return took


def librdkafka_mock() -> float:
    """Seconds from making a producer on librdkafka's mock cluster to its first metadata."""
    from confluent_kafka import Producer

    started = time.perf_counter()
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    producer.list_topics(timeout=10)
    took = time.perf_counter() - started
    producer.flush(1)
    return took


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms (min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    warm_n, cold_n = (3, 1) if args.quick else (15, 3)
    print(f"# bench_start {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"Python {platform.python_version()}, {warm_n} warm / {cold_n} cold trials")
    one_start()  # the process's first broker: imports, the mirror's template database
    warm = [one_start() for _ in range(warm_n)]
    cold = [cold_start() for _ in range(cold_n)]
    mock = [librdkafka_mock() for _ in range(warm_n)]
    print(f"# load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("| start | first ApiVersions answer | first HTTP 200 | CPU seconds of the process |")
    print("| --- | --- | --- | --- |")
    for what, trials in (("warm (a suite's every test after its first)", warm),
                         ("cold (a new interpreter, imports included)", cold)):
        print(f"| Exactly, {what} | {_ms([k for k, _, _ in trials])} | {_ms([w for _, w, _ in trials])} | "
              f"{_ms([c for _, _, c in trials])} |")
    print(f"| librdkafka mock cluster (first metadata answer) | {_ms(mock)} | -- | -- |")
    for clean in (True, False):
        print(f"| Exactly, restart in place ({'clean' if clean else 'unclean'}), to the first answer | "
              f"{_ms(restart(clean, warm_n))} | -- | -- |")
    for what, figure in PUBLISHED:
        print(f"| {what}, published | {figure} | -- | -- |")


if __name__ == "__main__":
    main()
