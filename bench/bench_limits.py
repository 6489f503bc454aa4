#!/usr/bin/env python3
"""What a partition costs, behind ``exactly.max.partitions``' default, measured in one run.

    .venv/bin/python bench/bench_limits.py            # full run (about half a minute)
    .venv/bin/python bench/bench_limits.py --quick    # a few seconds, for checking the script

1. create -- ``create_topic`` of N partitions (fsynced directories, topics.json): seconds,
             partitions per second, and the open file descriptors and inodes each
             partition holds; then what the default limit (4,000 partitions) adds up to.
2. refuse -- ``create_topic`` of 2^31-1 partitions refused with POLICY_VIOLATION, against
             ``create_topic(validate_only=True)`` of one partition: what the check costs.

Each figure is the median of its trials.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker  # noqa: E402
from exactly.app.config import BrokerConfig  # noqa: E402
from exactly.storage.errors import PolicyViolationError  # noqa: E402

CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
          "exactly.jobs.enable": False}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def inodes_used(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_files - stat.f_ffree


def create(root: Path, partitions: int) -> tuple[float, float, float]:
    """(seconds, descriptors per partition, inodes per partition) of one creation."""
    with Broker(root, **CONFIG, **{"exactly.max.partitions": partitions}) as broker:
        fds, inodes = open_fds(), inodes_used(root)
        start = time.perf_counter()
        broker.create_topic("t", partitions)
        seconds = time.perf_counter() - start
        return seconds, (open_fds() - fds) / partitions, (inodes_used(root) - inodes) / partitions


def refuse_us(broker: Broker, trials: int) -> tuple[float, float]:
    """Median microseconds of a refused 2^31-1 creation and of a validated 1-partition one."""
    refused, validated = [], []
    for _ in range(trials):
        start = time.perf_counter()
        try:
            broker.create_topic("huge", 2**31 - 1)
        except PolicyViolationError:
            pass
        refused.append(time.perf_counter() - start)
        start = time.perf_counter()
        broker.create_topic("one", 1, validate_only=True)
        validated.append(time.perf_counter() - start)
    return statistics.median(refused) * 1e6, statistics.median(validated) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    sizes, trials = ((100,), 50) if quick else ((500, 1000, 2000), 500)
    print(f"date:    {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} on {platform.platform()}")
    limit = BrokerConfig().exactly_max_partitions
    work = ROOT / "bench" / ".work"  # git-ignored, on the repository's disk
    work.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        print("\n1. create_topic of N partitions")
        print(f"{'N':>6} {'seconds':>8} {'partitions/s':>13} {'fds/partition':>14} {'inodes/partition':>17}")
        rates, fds = [], []
        for n in sizes:
            seconds, fd_each, inode_each = create(Path(scratch) / f"c{n}", n)
            rates.append(n / seconds)
            fds.append(fd_each)
            print(f"{n:>6} {seconds:>8.2f} {n / seconds:>13.0f} {fd_each:>14.2f} {inode_each:>17.2f}")
        rate, fd_each = statistics.median(rates), statistics.median(fds)
        print(f"at exactly.max.partitions={limit}: {limit * fd_each:.0f} descriptors held, "
              f"about {limit / rate:.1f} s to create them; RLIMIT_NOFILE here: "
              f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
        with Broker(Path(scratch) / "r", **CONFIG) as broker:
            refused, validated = refuse_us(broker, trials)
        print("\n2. refusing 2^31-1 partitions (POLICY_VIOLATION) against validating 1 partition")
        print(f"refused {refused:.0f} us, validated {validated:.0f} us: ratio {refused / validated:.2f}")


if __name__ == "__main__":
    main()
