#!/usr/bin/env python3
"""Maintenance benchmark: produce latency on one partition while another partition of
1 GiB is cleaned, and while retention deletes a 1 GiB partition's segments.

    .venv/bin/python bench/bench_maintenance.py            # full run (about 3 minutes, ~6.5 GB written)
    .venv/bin/python bench/bench_maintenance.py --quick    # 64 MiB partitions, for checking the script

A producer thread sends a 10 KiB batch (10 records of 1 KiB) with acks=all to the
partition ``live-0`` every 5 ms, and records each latency from the moment the send
was due to its acknowledgement (so a stall also counts against the sends it delays).
Beside it, a *loop probe* thread runs a no-op on the engine's loop every 5 ms: its
round trip is the loop's (and the GIL's) share of a request's latency with no fsync
in it, which on a shared disk is the steadier figure. Each trial measures both in
three windows, back to back:

1. quiet       -- nothing else happening, for as long as the compaction before took
                  (at least 5 s);
2. compaction  -- one log-cleaner round on a partition of 1 GiB of 1 KiB records
                  over 100,000 keys (each written about 10 times), in 128 MiB
                  segments: the round rewrites all of it to about a tenth;
3. retention   -- one retention pass deleting the 4 MiB segments of a partition of
                  1 GiB past its retention.ms (a pass takes about a second, so this
                  window has few sends; its p99 is their maximum, near enough).

Every partition is written before the first trial and synced, so no writeback of
the build lands in a window. The broker's own scheduled cleaner and retention run a
day apart (``log.cleaner.backoff.ms``, ``log.retention.check.interval.ms``): the
script runs each round itself, and a scheduled one would clean ``big`` during the
build or the quiet window. The ratios are maintenance / quiet of the same trial,
the median over the trials. Goal: **p99 within 2x of the quiet run**. The machine's
CPU and I/O pressure (``/proc/pressure``) are printed before and after: on a shared
machine they say how far to trust the figures. The data lives in ``bench/.work/``
(like bench_storage.py) and is deleted at the end unless ``--keep`` is given.

It uses only the Broker and Engine API, so the same script measures an older
revision too (copy it into that tree and run it there).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker  # noqa: E402
from bench_storage import print_machine  # noqa: E402
from exactly.storage import filenames  # noqa: E402
from exactly.storage.record_batch import SimpleRecord, encode_batch  # noqa: E402

T = TypeVar("T")
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

P99_GOAL_RATIO = 2.0
SEND_EVERY_S = 0.005
LIVE_BATCH = encode_batch([SimpleRecord(b"l" * KiB, key=b"live-%d" % i) for i in range(10)])
BUILD_BATCH_RECORDS = 100
DAY_MS = 24 * 3600 * 1000
#: the script runs every cleaning round and retention pass itself
NO_SCHEDULED_MAINTENANCE = {"log.cleaner.backoff.ms": DAY_MS, "log.retention.check.interval.ms": DAY_MS}
#: the replaced segments' files are freed at once (not file.delete.delay.ms later), and
#: each window lasts until they are gone: their freeing is measured, not put off
FREE_IN_WINDOW = {"file.delete.delay.ms": 0}
#: how long a window waits for the ``.deleted`` files to go
FREED_DEADLINE_S = 600.0


@dataclass(frozen=True)
class Sizes:
    partition_bytes: int
    keys: int
    cleaned_segment_bytes: int
    retained_segment_bytes: int
    trials: int
    min_quiet_s: float


FULL = Sizes(partition_bytes=1 * GiB, keys=100_000, cleaned_segment_bytes=128 * MiB,
             retained_segment_bytes=4 * MiB, trials=3, min_quiet_s=10.0)
QUICK = Sizes(partition_bytes=64 * MiB, keys=6_000, cleaned_segment_bytes=8 * MiB,
              retained_segment_bytes=1 * MiB, trials=1, min_quiet_s=1.0)


# -- the workload -------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Paced:
    """Calls ``action`` from a thread of its own, once every SEND_EVERY_S (or at once
    when the call before took longer), and records when each call started and ended."""

    def __init__(self, name: str, action: Callable[[], object]) -> None:
        self.action = action
        self.calls: list[tuple[float, float]] = []
        self._ended = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.action()
            done = time.perf_counter()
            with self._ended:
                self.calls.append((started, done))
                self._ended.notify_all()
            if done - started < SEND_EVERY_S:
                time.sleep(SEND_EVERY_S - (done - started))  # pacing the calls, not waiting for a condition

    def latencies(self, begin: float, end: float) -> list[float]:
        """The latency of every call in progress between ``begin`` and ``end`` (one held
        up from start to end counts too), once the call in progress at ``end`` is done."""
        with self._ended:
            if not self._ended.wait_for(lambda: self.calls and self.calls[-1][1] >= end, 600):
                raise TimeoutError(f"{self._thread.name} stopped")
        return [done - started for started, done in self.calls if started < end and done > begin]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def live_producer(broker: Broker) -> Paced:
    """Sends LIVE_BATCH to live-0 with acks=all."""
    return Paced("live-producer", lambda: broker.produce("live", 0, LIVE_BATCH, acks=-1))


def loop_probe(broker: Broker) -> Paced:
    """Runs nothing on the engine's loop: the round trip is how long the loop -- and
    the interpreter's GIL, which the caller, the loop and the reply all need -- kept a
    request waiting, with no disk in it (an acks=all produce also waits for an fsync,
    which on a shared disk varies far more than the loop does)."""
    return Paced("loop-probe", lambda: broker.engine.call(lambda: None))


def build_partition(broker: Broker, topic: str, sizes: Sizes, timestamp: int | None) -> int:
    """Fill ``topic``-0 with ``partition_bytes`` of 1 KiB records cycling over the keys;
    returns how many batches it took."""
    value = b"v" * KiB
    batches = 0
    written = 0
    key = 0
    while written < sizes.partition_bytes:
        records = [SimpleRecord(value, key=b"k%06d" % ((key + i) % sizes.keys), timestamp=timestamp)
                   for i in range(BUILD_BATCH_RECORDS)]
        key += BUILD_BATCH_RECORDS
        batch = encode_batch(records)
        broker.produce(topic, 0, batch, acks=1)
        written += len(batch)
        batches += 1
    broker.produce(topic, 0, encode_batch([SimpleRecord(value, key=b"end", timestamp=timestamp)]), acks=-1)
    return batches


def roll(broker: Broker, topic: str) -> None:
    """Start a new active segment, so every segment written so far may be maintained."""
    async def on_loop() -> None:
        broker.engine._logs.log(topic, 0).roll()
    broker.engine.call(on_loop)


def log_shape(broker: Broker, topic: str) -> str:
    async def on_loop() -> tuple[int, int]:
        log_ = broker.engine._logs.log(topic, 0)
        return len(log_.segments), log_.size_bytes
    segments, size = broker.engine.call(on_loop)
    return f"{segments} segments, {size / MiB:.0f} MiB"


def pressure() -> str:
    """The machine's CPU and I/O pressure (share of the last 60 s some task waited)."""
    out = []
    for kind in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{kind}") as f:
                some = f.readline().split()
            out.append(f"{kind} {some[2].split('=')[1]}%")
        except (OSError, IndexError):
            out.append(f"{kind} ?")
    return "pressure (avg60, some): " + ", ".join(out)


@dataclass
class Window:
    latencies: list[float]
    seconds: float

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) * 1e3 if self.latencies else float("nan")

    def text(self) -> str:
        return (f"p50 {self.p(0.5):7.2f} ms  p99 {self.p(0.99):8.2f} ms  max {max(self.latencies) * 1e3:8.1f} ms"
                f"  ({len(self.latencies)} sends, {self.seconds:.1f} s)")


def freed(workdir: Path, result: T) -> T:
    """``result``, once no ``.deleted`` file is left under ``workdir``: the window covers
    the freeing of what the maintenance replaced (paced, on the broker's deleter thread)."""
    deadline = time.monotonic() + FREED_DEADLINE_S
    while any(path.name.endswith(filenames.DELETED_SUFFIX) for path in workdir.rglob("*")):
        if time.monotonic() > deadline:
            raise TimeoutError(f".deleted files still under {workdir} after {FREED_DEADLINE_S} s")
        time.sleep(0.05)  # polling the directory; the broker gives no signal of a file freed
    return result


def measure(probes: list[Paced], action: Callable[[], object]) -> tuple[list[Window], object]:
    """One window per probe, over the time ``action()`` took; and what it returned."""
    begin = time.perf_counter()
    result = action()
    end = time.perf_counter()
    return [Window(probe.latencies(begin, end), end - begin) for probe in probes], result


def build(broker: Broker, sizes: Sizes, big: str, old: str) -> None:
    """A dirty compacted partition ``big`` and a partition ``old`` past retention."""
    broker.create_topic(big, 1, {"cleanup.policy": "compact", "segment.bytes": sizes.cleaned_segment_bytes,
                                 **FREE_IN_WINDOW})
    broker.create_topic(old, 1, {"segment.bytes": sizes.retained_segment_bytes, "retention.ms": DAY_MS,
                                 **FREE_IN_WINDOW})
    build_partition(broker, big, sizes, None)
    build_partition(broker, old, sizes, int(time.time() * 1000) - 2 * DAY_MS)
    roll(broker, big)
    roll(broker, old)
    broker.engine.call(broker.engine.jobs.take_snapshots, timeout=None)
    os.sync()  # the build's writeback must not land in a measured window


#: what the windows measure: the goal's produce latency, then the loop's own round trip
PROBES = ("produce", "loop")
Results = dict[str, dict[str, list[tuple[Window, Window]]]]


def run(workdir: Path, sizes: Sizes) -> Results:
    """(quiet, maintenance) windows of every trial, by probe and maintenance."""
    results: Results = {probe: {"compaction": [], "retention": []} for probe in PROBES}
    with Broker(workdir / "data", **NO_SCHEDULED_MAINTENANCE) as broker:
        engine = broker.engine
        broker.create_topic("live", 1)
        probes = [live_producer(broker), loop_probe(broker)]
        try:
            quiet_s = sizes.min_quiet_s
            for trial in range(sizes.trials):
                big, old = f"big{trial}", f"old{trial}"
                started = time.perf_counter()
                build(broker, sizes, big, old)
                print(f"\ntrial {trial + 1}: built {big}-0 and {old}-0 ({sizes.partition_bytes / MiB:.0f} MiB "
                      f"each) in {time.perf_counter() - started:.0f} s; {pressure()}")
                quiet, _ = measure(probes, lambda: time.sleep(quiet_s))
                cleaning, rewritten = measure(probes, lambda: freed(workdir, engine.call(engine.jobs.compact_logs,
                                                                                         timeout=None)))
                retention, deleted = measure(probes, lambda: freed(workdir, engine.call(engine.jobs.apply_retention,
                                                                                        timeout=None)))
                for i, probe in enumerate(PROBES):
                    print(f"  {probe:<8} quiet       {quiet[i].text()}")
                    print(f"  {probe:<8} compaction  {cleaning[i].text()}")
                    print(f"  {probe:<8} retention   {retention[i].text()}")
                    results[probe]["compaction"].append((quiet[i], cleaning[i]))
                    results[probe]["retention"].append((quiet[i], retention[i]))
                print(f"  {rewritten} segments rewritten, {big} now {log_shape(broker, big)}; "
                      f"{deleted} segments deleted, {old} now {log_shape(broker, old)}")
                quiet_s = max(sizes.min_quiet_s, cleaning[0].seconds)
        finally:
            for probe_ in probes:
                probe_.stop()
    print(f"\n{pressure()}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB partitions; for checking the script")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work",
                        help="where the data goes (default bench/.work/); must be on the disk to measure")
    parser.add_argument("--keep", action="store_true", help="do not delete the data afterwards")
    parser.add_argument("--trials", type=int, help="how many trials (default: 3, or 1 with --quick); "
                        "1 to alternate runs of two revisions on a machine whose load changes")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.trials:
        sizes = replace(sizes, trials=args.trials)
    args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir / f"run-{os.getpid()}"
    workdir.mkdir()
    print_machine(workdir, args.quick)
    started = time.perf_counter()
    try:
        results = run(workdir, sizes)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            with contextlib.suppress(OSError):
                args.workdir.rmdir()  # only if nothing else is in it
    print("\nsummary (maintenance / quiet of the same trial; median over trials):")
    for probe, by_maintenance in results.items():
        for name, pairs in by_maintenance.items():
            p50 = statistics.median(m.p(0.5) / q.p(0.5) for q, m in pairs)
            p99s = [m.p(0.99) / q.p(0.99) for q, m in pairs]
            p99 = statistics.median(p99s)
            verdict = ("  MET  " if p99 <= P99_GOAL_RATIO else "NOT MET") if probe == "produce" else "       "
            print(f"  [{verdict}] {probe:<8} {name:<10}  p50 x{p50:.2f}   p99 x{p99:.2f}  (trials: "
                  f"{', '.join(f'x{r:.2f}' for r in p99s)}{'; goal p99 <= x2' if probe == 'produce' else ''})")
    print(f"\ntotal time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
