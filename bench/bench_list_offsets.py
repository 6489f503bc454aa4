#!/usr/bin/env python3
"""ListOffsets by time: what one lookup costs the broker's loop (it runs there, as fetch does).

    .venv/bin/python bench/bench_list_offsets.py

A partition of 200 batches of 1,000 records (100-byte values, one timestamp a
millisecond), uncompressed and gzip; 200 lookups of random times, then 200 of the max
timestamp (-3). Each lookup finds its batch through the time and offset indexes and walks
that batch's records to the first one at or after the time (``record_times``: Length,
TimestampDelta and OffsetDelta, the rest stepped over), as Kafka's
``LogSegment.findOffsetByTimestamp`` does. The mean per lookup is printed.
"""

from __future__ import annotations

import random
import tempfile
import time

from exactly.storage.clock import FakeClock
from exactly.storage.compression import Compression
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.storage_log import DurableLogs

BATCHES, RECORDS, LOOKUPS = 200, 1000, 200
START = 10**12


def main() -> None:
    rng = random.Random(7)
    for compression in (Compression.NONE, Compression.GZIP):
        with tempfile.TemporaryDirectory() as directory, DurableLogs(directory, clock=FakeClock(START)) as logs:
            logs.create_topic("t", 1, {"segment.bytes": 64 << 20})
            for b in range(BATCHES):
                logs.produce("t", 0, encode_batch([SimpleRecord(b"x" * 100, key=b"k", timestamp=START + b * RECORDS + i)
                                                   for i in range(RECORDS)], compression=compression))
            log = logs.log("t")
            times = [START + rng.randrange(BATCHES * RECORDS) for _ in range(LOOKUPS)]
            began = time.perf_counter()
            for t in times:
                log.offset_for_timestamp(t)
            by_time = (time.perf_counter() - began) / LOOKUPS
            began = time.perf_counter()
            for _ in range(LOOKUPS):
                log.offset_of_max_timestamp()
            by_max = (time.perf_counter() - began) / LOOKUPS
            print(f"{compression.name.lower():5} a time: {by_time * 1e3:.2f} ms   max timestamp: {by_max * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
