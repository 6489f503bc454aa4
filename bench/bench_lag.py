#!/usr/bin/env python3
"""Group lag benchmark: what counting a read_committed consumer's lag costs the
engine's loop (``exactly/storage/visibility.py``, ``read_committed_lag``, from the counts each
partition keeps: ``exactly/storage/visible_records.py``), against reading the same range the
way the consumer itself would (fetch read_committed, decode every record).

    .venv/bin/python bench/bench_lag.py            # 20,000 batches
    .venv/bin/python bench/bench_lag.py --quick    # 2,000, for checking the script

One partition holds single-record batches (100-byte values); every tenth batch is
a committed transaction of its own (a record, then its COMMIT marker) and every
twentieth an aborted one, so the count has markers and aborted ranges to skip. A
group has committed offset 0. For ranges of 100, 1,000 and all batches it prints the
median time of one lag count, of a consumer's read of the range, and the ratio
count / read: the count is two prefix sums of a Fenwick tree, so it should not grow
with the range (O(log n)), where the read grows linearly.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exactly.app import Broker  # noqa: E402
from exactly.storage import visibility  # noqa: E402
from exactly.storage.read_committed import read_records  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

WORK = Path(__file__).resolve().parent / ".work" / "lag"
TRIALS = 7


def build(broker: Broker, batches: int) -> None:
    broker.create_topic("t", 1)
    plain = encode_batch([SimpleRecord(b"v" * 100, key=b"k")])
    txn = broker.producer(transactional_id="bench", linger_ms=0)
    txn.init_transactions()
    for i in range(batches):
        if i % 10 == 0:
            txn.begin_transaction()
            txn.send("t", b"v" * 100, partition=0).get(timeout=10)
            txn.abort_transaction() if i % 20 == 0 else txn.commit_transaction()
        else:
            broker.produce("t", 0, plain, acks=1)
    consumer = broker.consumer(group_id="g", enable_auto_commit=False)
    consumer.commit({("t", 0): 0})
    consumer.close()


def count(broker: Broker, upper: int) -> int:
    async def run() -> int:
        return visibility.data_records(broker.engine._logs.log("t", 0), 0, upper)
    return broker.engine.call(run)


def read(broker: Broker, upper: int, size: int) -> int:
    """What the consumer does: fetch the range (``size`` bytes) read_committed, decode it."""
    offset, records = 0, 0
    while offset < upper:
        result = broker.fetch("t", 0, offset, size, "read_committed")
        records += sum(1 for r in read_records(result.records, offset, True, result.aborted_transactions).records
                       if r.offset < upper)
        offset = result.next_offset
    return records


def median_ms(fn, *args) -> tuple[float, int]:
    times, value = [], 0
    for _ in range(TRIALS):
        start = time.perf_counter()
        value = fn(*args)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    batches = 2_000 if parser.parse_args().quick else 20_000
    shutil.rmtree(WORK, ignore_errors=True)
    try:
        with Broker(WORK / "data", **{"transaction.state.log.num.partitions": 1}) as broker:
            build(broker, batches)
            log = broker.engine._logs.log("t", 0)
            print(f"{batches} batches, {log.high_watermark} offsets, LSO {log.last_stable_offset}")
            print(f"{'range':>22} {'count ms':>9} {'read ms':>9} {'count/read':>10} {'us/batch':>9}")
            total = len(list(log.headers(0, log.high_watermark)))
            for label, n in (("100 batches", 100), ("1,000 batches", 1_000), ("all", total)):
                headers = list(log.headers(0, log.high_watermark))[:n]
                upper, size = headers[-1].next_offset, sum(h.size for h in headers)
                counted_ms, counted = median_ms(count, broker, upper)
                read_ms, received = median_ms(read, broker, upper, size)
                assert counted == received, (counted, received)
                print(f"{label:>22} {counted_ms:9.2f} {read_ms:9.2f} {counted_ms / read_ms:10.2f} "
                      f"{1000 * counted_ms / n:9.1f}")
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
