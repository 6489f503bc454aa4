#!/usr/bin/env python3
"""Hostile frames on the Kafka port: the full sweep of the schema-derived fuzzer, and what
the request pre-scan costs.

    .venv/bin/python bench/fuzz_kafka.py                 # 3 rounds, every mutant (a few minutes)
    .venv/bin/python bench/fuzz_kafka.py --rounds 1      # one round
    .venv/bin/python bench/fuzz_kafka.py --seed 7        # another seed (a failure prints its seed)

1. fuzz  -- ``python -m exactly serve`` in a process of its own, on a temporary data
            directory. Each round sends, for every API and version the listener serves
            (``APIS``), a valid request (which must be answered) and every mutant of it
            (``tests/kafka_fuzz.py``: each length and count made huge, negative, null
            or overlong; cut short; trailing bytes; unknown and lying tagged fields;
            record batches that lie under a good CRC). After each round: the process
            is alive, logged no ERROR, a confluent-kafka producer and consumer still
            work, and the broker is stopped (SIGKILL and SIGTERM in turn) and started
            again on the same directory, where every acknowledged value must be read
            back. Figures: frames per API/version and what came of them, peak RSS.
2. prescan -- ``exactly/app/kafka/prescan.py`` against kio's own reader, in this process: a
            Produce v9 of 1 MB of records and small requests (median of many runs).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_reader  # noqa: E402

from exactly.app.kafka.api import APIS, ApiKey  # noqa: E402
from exactly.app.kafka.prescan import prescan  # noqa: E402
from exactly.app.kafka.wire import encode_request  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402
from tests.kafka_fuzz import Campaign, ServedBroker  # noqa: E402


def fuzz_sweep(seed: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-kafka-") as work:
        broker = ServedBroker(Path(work) / "data")
        broker.start()
        campaign, started = Campaign(broker, seed), time.monotonic()
        try:
            for number in range(rounds):
                kill = number % 2 == 0
                campaign.round(None, kill=kill, values=100)
                print(f"round {number}: {campaign.frames} frames so far, peak RSS {campaign.peak_kb / 1024:.0f} MiB; "
                      f"{'SIGKILL' if kill else 'SIGTERM'} and restart: all {len(campaign.acknowledged)} "
                      "acknowledged values read back")
        finally:
            if broker.alive:
                broker.stop(kill=True)
    _report(campaign, rounds, time.monotonic() - started)


def _report(campaign: Campaign, rounds: int, elapsed: float) -> None:
    tallies = campaign.fuzzer.tallies
    print(f"\n{'api':<24} {'v':>2} {'frames':>7} {'answered':>9} {'closed':>7} {'silent':>7}")
    for (api_key, version), tally in sorted(tallies.items()):
        o = tally.outcomes
        print(f"{APIS[api_key].name:<24} {version:>2} {tally.frames:>7} {o['answered']:>9} {o['closed']:>7} "
              f"{o['silent']:>7}")
    print(f"\nseed {campaign.seed}, {rounds} round(s): frames sent {campaign.frames} to {len(tallies)} API "
          f"versions in {elapsed:.0f} s; peak RSS {campaign.peak_kb / 1024:.0f} MiB (at start "
          f"{campaign.start_peak_kb / 1024:.0f} MiB); crashes=0, ERROR lines logged=0 (either stops the sweep)")


def _median_us(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def prescan_cost() -> None:
    batch = encode_batch([SimpleRecord(bytes(1000), key=b"k%d" % i) for i in range(1000)])
    requests = {
        "Produce v9, 1 MB of records": (ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}),
        "Fetch v11, 8 partitions": (ApiKey.FETCH, 11, {"max_wait": 500, "min_bytes": 1, "topics": [
            {"topic": "t", "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                          for p in range(8)]}]}),
        "Metadata v8, 1 topic": (ApiKey.METADATA, 8, {"topics": [{"name": "t"}]}),
        "ApiVersions v3": (ApiKey.API_VERSIONS, 3, {"client_software_name": "a", "client_software_version": "1"}),
    }
    print(f"\n{'request':<30} {'bytes':>9} {'kio read µs':>12} {'prescan µs':>11} {'prescan/kio':>12}")
    for what, (api_key, version, body) in requests.items():
        frame = encode_request(api_key, version, 1, "bench", body)[4:]
        cls = load_request_schema(api_key, version)
        header_reader, body_reader = entity_reader(cls.__header_schema__), entity_reader(cls)
        view = memoryview(frame)

        def kio_read() -> None:
            _, used = header_reader(view, 0)
            body_reader(view, used)

        def scan() -> None:
            used, _ = prescan(cls.__header_schema__, frame, 0)
            prescan(cls, frame, used)

        runs = 2000
        kio_us, scan_us = _median_us(kio_read, runs), _median_us(scan, runs)
        print(f"{what:<30} {len(frame):>9} {kio_us:>12.1f} {scan_us:>11.1f} {scan_us / kio_us:>11.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python bench/fuzz_kafka.py {' '.join(sys.argv[1:])}".rstrip())
    prescan_cost()
    print()
    fuzz_sweep(args.seed, args.rounds)


if __name__ == "__main__":
    main()
