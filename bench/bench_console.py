#!/usr/bin/env python3
"""What the console costs the engine's loop, measured in one run.

    .venv/bin/python bench/bench_console.py            # full run (about two minutes)
    .venv/bin/python bench/bench_console.py --quick    # seconds, for checking the script
    .venv/bin/python bench/bench_console.py --part 2   # only the console open while producing

The browser's read models run on the engine's loop (``exactly/app/engine/record_browser.py``),
so each page is time the loop does not serve produce or fetch. One partition of 20 000
small JSON records in batches of 10 (one segment); each figure is the median of its
trials, against the records view the partition page already showed (``read_models.records``,
25 records), which walks the segment's batch headers from its start:

1. newest page   -- the newest 20 records (read through the offset index, plus their
                    read_committed states from the records view);
2. middle page   -- 20 records from offset 10 000 (the records view alone from there: 25);
3. filtered scan -- a filter nothing matches: the scan limit's worth of records (2000);
4. read_committed -- the newest 20 records a read_committed consumer receives;
5. detail        -- one record, its batch and state.

Part [2], the console open while a producer writes (``--part 2`` alone): a broker with
10 groups x 50 partitions (BATCHES single-record batches in each partition, every
group's committed offset at 0 on all 50) and the real HTTP server (waitress, in this
process, as ``run.py`` serves it). A producer writes one partition of another topic,
one batch at a time, acks=all, for PHASE_S seconds with nothing else going on (quiet),
then PHASE_S seconds more while two console tabs poll at the console's real rate --
the groups page and one group's page, each fragment and the status badge every 2 s --
and /metrics is scraped every 2 s (harsher than Prometheus' usual 15 s). It prints
the produce p50/p99 of both phases and the ratio of the p99s: the goal is <= 2x.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker  # noqa: E402
from exactly.app.engine import read_models, record_browser  # noqa: E402
from exactly.app.http import create_app  # noqa: E402
from exactly.app.http.server import HttpServer  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
          "exactly.jobs.enable": False}
RECORDS = 20_000
GROUPS, PARTITIONS, BATCHES = 10, 50, 1_000
PHASE_S = 20.0
#: what an open console tab asks every 2 s (htmx ``every 2s``): its page's live fragment and the status badge
TABS = (("/fragments/groups", "/fragments/status"), ("/fragments/groups/g0", "/fragments/status"))
REFRESH_S = 2.0
SCRAPE_S = 2.0


def median_ms(fn: Callable[[], object], trials: int) -> float:
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def browser(trials: int) -> None:
    """Part [1]: the record browser's loop time per request."""
    with tempfile.TemporaryDirectory() as scratch, Broker(Path(scratch) / "data", **CONFIG) as broker:
        broker.create_topic("t", 1)
        for base in range(0, RECORDS, 10):
            broker.produce("t", 0, encode_batch([SimpleRecord(b'{"order": %d, "customer": "c-%d"}' % (i, i % 97),
                                                              key=b"k%d" % i) for i in range(base, base + 10)]))
        engine = broker.engine

        def call(fn, *args, **kwargs) -> Callable[[], object]:
            return lambda: engine.call(fn, engine, "t", 0, *args, **kwargs)

        reference = median_ms(call(read_models.records, None, limit=25), trials)
        middle_reference = median_ms(call(read_models.records, RECORDS // 2, limit=25), trials)
        rows = [("newest page (20)", median_ms(call(record_browser.page), trials), reference),
                ("middle page (20)", median_ms(call(record_browser.page, RECORDS // 2), trials), middle_reference),
                (f"filtered scan ({record_browser.SCAN_LIMIT})",
                 median_ms(call(record_browser.page, 0, text="no such text"), trials), reference),
                ("read_committed page (20)", median_ms(call(record_browser.page, read_committed=True), trials),
                 reference),
                ("detail (1)", median_ms(call(record_browser.record, RECORDS // 2), trials), middle_reference)]
    print(f"\n[1] loop time per console request, {RECORDS} records in one segment ({trials} trials, medians)")
    print(f"  records view (newest 25)            {reference:7.2f} ms")
    print(f"  records view (25 from the middle)   {middle_reference:7.2f} ms")
    for name, ms, against in rows:
        print(f"  {name:<35} {ms:7.2f} ms  ({ms / against:5.2f}x of the records view)")


def fill_groups(broker: Broker, batches: int) -> None:
    """GROUPS groups, each committed at offset 0 on PARTITIONS partitions of ``batches`` batches."""
    broker.create_topic("lagging", PARTITIONS)
    batch = encode_batch([SimpleRecord(b"v" * 100, key=b"k")])
    engine = broker.engine
    for partition in range(PARTITIONS):
        pending = [engine.submit(engine.partitions.start_produce, "lagging", partition, batch, 1, None)
                   for _ in range(batches)]
        for future in pending:
            future.result(60)
    for g in range(GROUPS):
        consumer = broker.consumer(group_id=f"g{g}", enable_auto_commit=False)
        consumer.commit({("lagging", p): 0 for p in range(PARTITIONS)})
        consumer.close()


def produce_latencies(broker: Broker, seconds: float) -> list[float]:
    """One producer writing one partition, a batch at a time, acks=all: each latency in ms."""
    batch = encode_batch([SimpleRecord(b"x" * 100, key=b"k")])
    latencies, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        broker.produce("hot", 0, batch, acks=-1)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


class Poller(threading.Thread):
    """GETs ``paths`` every ``every_s`` seconds, as an open tab or a scraper does; keeps each response time."""

    def __init__(self, base: str, paths: tuple[str, ...], every_s: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.base, self.paths, self.every_s, self.stop = base, paths, every_s, stop
        self.times_ms: list[float] = []
        self.failed: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            tick = time.monotonic()
            for path in self.paths:
                start = time.perf_counter()
                try:
                    with urllib.request.urlopen(self.base + path, timeout=60) as response:
                        response.read()
                except OSError as error:  # HTTPError included: a 500/504 is an answer too, a failed one
                    self.failed.append(f"{path}: {error}")
                self.times_ms.append((time.perf_counter() - start) * 1000)
            self.stop.wait(max(0.0, self.every_s - (time.monotonic() - tick)))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def console_open(batches: int, phase_s: float) -> None:
    """Part [2]: produce p99 on one partition, quiet and with the console open."""
    with tempfile.TemporaryDirectory() as scratch, Broker(Path(scratch) / "data", **CONFIG) as broker:
        started = time.perf_counter()
        fill_groups(broker, batches)
        broker.create_topic("hot", 1)
        print(f"\n[2] produce with the console open: {GROUPS} groups x {PARTITIONS} partitions x {batches} "
              f"batches (built in {time.perf_counter() - started:.0f} s), {phase_s:.0f} s per phase")
        sock = socket.create_server(("127.0.0.1", 0))
        http = HttpServer(create_app(broker.engine), sock, threads=4).start()
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        try:
            produce_latencies(broker, 1.0)  # warm-up
            quiet = produce_latencies(broker, phase_s)
            stop = threading.Event()
            pollers = [Poller(base, paths, REFRESH_S, stop) for paths in TABS]
            pollers.append(Poller(base, ("/metrics",), SCRAPE_S, stop))
            for poller in pollers:
                poller.start()
            busy = produce_latencies(broker, phase_s)
            stop.set()
            for poller in pollers:
                poller.join(120)
        finally:
            http.close()
            sock.close()
    q99, b99 = percentile(quiet, 0.99), percentile(busy, 0.99)
    print(f"  quiet          {len(quiet):6d} batches  p50 {percentile(quiet, 0.5):7.2f} ms  p99 {q99:7.2f} ms")
    print(f"  console open   {len(busy):6d} batches  p50 {percentile(busy, 0.5):7.2f} ms  p99 {b99:7.2f} ms")
    for poller in pollers:
        print(f"  {' + '.join(poller.paths):<45} {len(poller.times_ms):3d} GETs ({len(poller.failed)} failed), "
              f"median {statistics.median(poller.times_ms):7.1f} ms, max {max(poller.times_ms):7.1f} ms")
        for failure in sorted(set(poller.failed)):
            print(f"    failed: {failure}")
    print(f"  p99 console open / quiet: {b99 / q99:.2f}x  [{'MET' if b99 <= 2 * q99 else 'NOT MET'}: goal <= 2x]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--part", type=int, choices=(1, 2), help="only this part")
    args = parser.parse_args()
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} on {platform.platform()}")
    if args.part in (None, 1):
        browser(3 if args.quick else 30)
    if args.part in (None, 2):
        console_open(BATCHES // 10 if args.quick else BATCHES, PHASE_S / 10 if args.quick else PHASE_S)


if __name__ == "__main__":
    main()
