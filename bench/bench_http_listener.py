#!/usr/bin/env python3
"""The HTTP listener under many connections (exactly/app/http/server.py), measured in one run.

    .venv/bin/python bench/bench_http_listener.py            # full run (about half a minute)
    .venv/bin/python bench/bench_http_listener.py --quick    # a few seconds, for checking the script

For each number of half-sent requests held open (a head that never ends, as a slow
client sends it) and of idle Kafka connections, a GET of ``/v3/clusters`` is timed:
the median and the worst of its trials. With the descriptor counts the process then
holds: past 1,024 the select() loop of waitress' default failed for good.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app.server import Server  # noqa: E402

HALF_SENT = b"GET /v3/clusters HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def timed_get(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    return time.perf_counter() - started


def hold(stack: ExitStack, port: int, count: int, first: bytes, accepted=None) -> None:
    for i in range(count):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
        if first:
            sock.sendall(first)
        if accepted is not None and i % 50 == 49:
            while accepted() < i + 1:  # a full listen queue would cost a second per handshake
                time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    trials = 5 if args.quick else 30
    shapes = [(0, 0), (500, 0), (0, 2000)] if args.quick else [(0, 0), (500, 0), (2000, 0), (0, 2000), (2000, 2000)]
    print(f"# bench_http_listener {datetime.date.today()} on {platform.node()} ({platform.processor() or '?'}), "
          f"{trials} GETs per row")
    print("| half-sent HTTP requests | idle Kafka connections | descriptors | GET median ms | GET worst ms |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        with Server(Path(tmp) / "data", **{"exactly.jobs.enable": False}) as server:
            url = f"{server.http_url}/v3/clusters"
            timed_get(url)
            for slow, idle in shapes:
                with ExitStack() as stack:
                    hold(stack, server.http_port, slow, HALF_SENT)
                    hold(stack, server.kafka_port, idle, b"", lambda: len(server.engine.clients))
                    timed_get(url)
                    took = [timed_get(url) for _ in range(trials)]
                    fds = len(list(Path("/proc/self/fd").iterdir()))
                    print(f"| {slow} | {idle} | {fds} | {statistics.median(took) * 1000:.1f} | "
                          f"{max(took) * 1000:.1f} |", flush=True)


if __name__ == "__main__":
    main()
