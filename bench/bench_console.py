#!/usr/bin/env python3
"""What the console's record browser costs the engine's loop, measured in one run.

    .venv/bin/python bench/bench_console.py            # full run (about ten seconds)
    .venv/bin/python bench/bench_console.py --quick    # a second, for checking the script

The browser's read models run on the engine's loop (``app/engine/record_browser.py``),
so each page is time the loop does not serve produce or fetch. One partition of 20 000
small JSON records in batches of 10 (one segment); each figure is the median of its
trials, against the records view the partition page already showed (``queries.records``,
25 records), which walks the segment's batch headers from its start:

1. newest page   -- the newest 20 records (read through the offset index, plus their
                    read_committed states from the records view);
2. middle page   -- 20 records from offset 10 000 (the records view alone from there: 25);
3. filtered scan -- a filter nothing matches: the scan limit's worth of records (2000);
4. read_committed -- the newest 20 records a read_committed consumer receives;
5. detail        -- one record, its batch and state.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import Broker  # noqa: E402
from app.engine import queries, record_browser  # noqa: E402
from storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
          "exactly.jobs.enable": False}
RECORDS = 20_000


def median_ms(fn: Callable[[], object], trials: int) -> float:
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    trials = 3 if parser.parse_args().quick else 30
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} on {platform.platform()}")
    with tempfile.TemporaryDirectory() as scratch, Broker(Path(scratch) / "data", **CONFIG) as broker:
        broker.create_topic("t", 1)
        for base in range(0, RECORDS, 10):
            broker.produce("t", 0, encode_batch([SimpleRecord(b'{"order": %d, "customer": "c-%d"}' % (i, i % 97),
                                                              key=b"k%d" % i) for i in range(base, base + 10)]))
        engine = broker.engine

        def call(fn, *args, **kwargs) -> Callable[[], object]:
            return lambda: engine.call(fn, engine, "t", 0, *args, **kwargs)

        reference = median_ms(call(queries.records, None, limit=25), trials)
        middle_reference = median_ms(call(queries.records, RECORDS // 2, limit=25), trials)
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


if __name__ == "__main__":
    main()
