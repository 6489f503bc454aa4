#!/usr/bin/env python3
"""What one broker lifecycle costs: opening and closing a ``Broker``, measured in one run.

    .venv/bin/python bench/bench_lifecycle.py            # full run (about half a minute)
    .venv/bin/python bench/bench_lifecycle.py --quick    # a few seconds, for checking the script

1. open+close -- ``Broker(new dir)`` then ``close()``: as every broker runs (the SQLite
                 mirror created, the scheduled jobs started, stopped, and the mirror's last
                 round on close), against the same with ``exactly.jobs.enable=false`` (the
                 mirror created, no jobs, no last round). The suite opens about a thousand
                 brokers: this is what the lifecycle adds to it.
2. mirror db  -- ``upgrade()`` of ``exactly.db``: a new database (a copy of the one the
                 migrations built once per process), a database at the head revision (one
                 query), against running Alembic's migrations on a new database (what the
                 copy replaces).

The trials of the variants are interleaved so drift in the disk's speed affects them
alike; each figure is the median of its trials.
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

from exactly.app import Broker  # noqa: E402
from exactly.coordinator import mirror_db  # noqa: E402

CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}


def timed_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    trials = 20 if parser.parse_args().quick else 200
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} on {platform.platform()}")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        names = iter(range(10 ** 9))

        def open_close(**config: object) -> None:
            Broker(root / f"b{next(names)}", **CONFIG, **config).close()

        open_close()  # imports, the migrated image
        variants = {"jobs and mirror (every broker)": lambda: open_close(),
                    "exactly.jobs.enable=false": lambda: open_close(**{"exactly.jobs.enable": False})}
        report("[1] open+close of a Broker on a new data directory", variants, trials)

        current = root / "current.db"
        mirror_db.upgrade(current)
        variants = {"new database (copy)": lambda: mirror_db.upgrade(root / f"m{next(names)}.db"),
                    "current database (one query)": lambda: mirror_db.upgrade(current),
                    "new database (Alembic's run)": lambda: mirror_db._migrate(root / f"a{next(names)}.db")}
        report("[2] mirror database on open: upgrade()", variants, trials)


def report(title: str, variants: dict[str, Callable[[], None]], trials: int) -> None:
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(trials):
        for name, fn in variants.items():
            samples[name].append(timed_ms(fn))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    baseline = medians[list(variants)[-1]]
    print(f"\n{title} ({trials} trials each, medians)")
    for name, median in medians.items():
        print(f"  {name:<34} {median:7.2f} ms  ({median / baseline:5.2f}x of the last)")


if __name__ == "__main__":
    main()
