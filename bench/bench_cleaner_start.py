#!/usr/bin/env python3
"""The first cleaning round of a broker on a busy machine, against the same round on a
quiet one, measured in one run.

    .venv/bin/python bench/bench_cleaner_start.py            # 5 trials of each (about a minute)
    .venv/bin/python bench/bench_cleaner_start.py --quick    # 1 trial, for checking the script

A broker's first cleaning round starts the cleaner's worker process (a new interpreter
that imports the broker, exactly/app/engine/worker_process.py) and then cleans at a lower CPU
priority (nice 10). Each trial opens a broker on a new directory with one compacted
partition of a few thousand records and times ``compact_logs()``: quiet, and with one
busy-looping process per core at normal priority beside it (what a test suite or a build
on the same machine does). The trials of the two variants are interleaved; each figure is
the median of its trials.

Before the worker was started by a launcher thread of normal priority, it inherited the
niced maintenance thread's priority and did its imports at nice 10: 15 s busy against
1.4 s quiet (x10) in the EOS loop's first jobs round.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

TOPIC = "compacted"
CONFIG = {"transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1,
          "exactly.jobs.enable": False}


def busy_loop() -> None:
    while True:
        pass


def first_round(directory: Path) -> float:
    """Seconds of the first ``compact_logs()`` of a broker with one dirty compacted partition."""
    with Broker(directory, **CONFIG) as broker:
        broker.create_topic(TOPIC, 1, config={"cleanup.policy": "compact", "segment.bytes": 65536})
        for batch in range(40):
            broker.produce(TOPIC, 0, encode_batch(
                [SimpleRecord(b"value-%d-%d" % (batch, i), key=b"key-%d" % (i % 50)) for i in range(100)]))
        started = time.perf_counter()
        cleaned = broker.engine.call(broker.engine.jobs.compact_logs)
        elapsed = time.perf_counter() - started
        assert cleaned > 0, "the round cleaned nothing: the bench measures no cleaning"
    return elapsed


def trial(busy: bool) -> float:
    hogs = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(os.cpu_count() or 1)] if busy else []
    for hog in hogs:
        hog.start()
    try:
        with tempfile.TemporaryDirectory() as directory:
            return first_round(Path(directory) / "data")
    finally:
        for hog in hogs:
            hog.kill()
            hog.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one trial of each")
    args = parser.parse_args()
    trials = 1 if args.quick else 5
    quiet: list[float] = []
    busy: list[float] = []
    for _ in range(trials):
        quiet.append(trial(False))
        busy.append(trial(True))
    print(f"date:       {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"command:    python bench/bench_cleaner_start.py{' --quick' if args.quick else ''}")
    print(f"machine:    {os.cpu_count()} CPUs, Python {platform.python_version()}, {trials} trial(s) of each")
    print(f"quiet:      first round {statistics.median(quiet):.2f} s  (trials {', '.join(f'{t:.2f}' for t in quiet)})")
    print(f"busy:       first round {statistics.median(busy):.2f} s  (trials {', '.join(f'{t:.2f}' for t in busy)}),"
          f" {os.cpu_count()} busy-looping processes beside it")
    print(f"ratio:      busy / quiet x{statistics.median(busy) / statistics.median(quiet):.2f}")


if __name__ == "__main__":
    main()
