#!/usr/bin/env python3
"""What the exactly-once audit costs, in each of its modes, on one input partition of
N records turned 1:1 into one output partition by transactions of 1,000 records.

    .venv/bin/python bench/bench_audit.py              # 50,000 records, 3 audits per mode
    .venv/bin/python bench/bench_audit.py --records 200000

The audit reads the input and output records whatever the mode (which records a
read_committed consumer receives, and the lineage headers); the output is written twice
-- without the ``exactly.input`` header (the offsets and ``records_per_input`` modes) and
with it (lineage) -- by the embedded producer on an in-process broker. Each figure is
the median of the audits' wall times, and records per second of input.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app.lineage import header  # noqa: E402
from exactly.app.server import Server  # noqa: E402
from exactly.app.testing import broker  # noqa: E402

TRANSACTION = 1000


def fill(served: Server, records: int, output: str, group: str, with_lineage: bool) -> None:
    """The output of ``group``'s 1:1 transform of ``in``, committed ``TRANSACTION`` records at a time."""
    served.broker.create_topic(output, 1)
    producer = served.broker.producer(transactional_id=group, batch_size=1 << 20)
    producer.init_transactions()
    for start in range(0, records, TRANSACTION):
        producer.begin_transaction()
        for n in range(start, min(start + TRANSACTION, records)):
            producer.send(output, b"paid %d" % n, partition=0, headers=[header("in", 0, n)] if with_lineage else None)
        producer.send_offsets_to_transaction({("in", 0): min(start + TRANSACTION, records)}, group)
        producer.commit_transaction()
    producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with broker() as served:
        served.broker.create_topic("in", 1)
        plain = served.broker.producer(batch_size=1 << 20)
        for n in range(args.records):
            plain.send("in", b"order %d" % n, partition=0)
        plain.close()
        fill(served, args.records, "out", "plain", with_lineage=False)
        fill(served, args.records, "out-lineage", "lineage", with_lineage=True)
        for label, group, output, options in (("offsets", "plain", "out", {}),
                                              ("records_per_input=1", "plain", "out", {"records_per_input": 1}),
                                              ("lineage", "lineage", "out-lineage", {})):
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                view = served.audit(group, "in", output, **options)
                times.append(time.perf_counter() - started)
                assert view.ok, view.violations
            median = statistics.median(times)
            print(f"{label:20} {args.records} records: {median:.2f} s ({args.records / median:,.0f} records/s)")


if __name__ == "__main__":
    main()
