#!/usr/bin/env python3
"""Storage benchmarks: append, fetch and restart figures, measured in one run on one disk.

    .venv/bin/python bench/bench_storage.py            # full run (about a minute, ~10 GB written)
    .venv/bin/python bench/bench_storage.py --quick    # smaller sizes (about 5 s)
    .venv/bin/python bench/bench_storage.py --only append,fetch

Sections (bench/README.md says what each one measures and why):

1. raw      -- sequential 100 KiB writes with fdatasync after every chunk (one
               acks=all append's durability unit), then every N chunks, for context.
2. append   -- ``Broker.produce(..., acks=-1)`` of pre-encoded idempotent batches of
               100 x 1 KiB records: one producer thread, then 4 on the same partition.
3. fetch    -- read_uncommitted vs read_committed ``Broker.fetch`` of a transactional
               partition with 1% aborted transactions, raw and decoded to records.
4. restart  -- ``Broker(...)`` construction over a 1 GiB partition (128 MiB with
               --quick): fresh snapshot, no snapshots, unclean shutdown.

Every figure is the median of its trials; MB is 10**6 bytes. The data lives in a
work directory on the same filesystem as the repository (``bench/.work/`` by
default) and is deleted at the end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactly.app import Broker
from exactly.storage import filenames
from exactly.storage.checkpoint import read_checkpoint, write_checkpoint
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch

KiB = 1024
MiB = 1024 * 1024
MB = 1_000_000

RECORD_VALUE_BYTES = 1 * KiB
RAW_CHUNK_BYTES = 100 * KiB

# Goals stated by the issue.
APPEND_GOAL_RATIO = 0.50     # acks=all append >= 50% of raw fdatasync bandwidth
FETCH_GOAL_RATIO = 0.90      # read_committed >= 90% of read_uncommitted
RESTART_GOAL_SECONDS = 1.0   # reopen a 1 GiB partition with a fresh snapshot in < 1 s


@dataclass(frozen=True)
class Sizes:
    """How much each section writes; --quick scales everything down."""

    raw_bytes: int                # bytes per raw-write trial
    raw_trials: int
    append_batches: int           # batches per append trial (split between the threads)
    append_trials: int
    fetch_records: int            # data records in the transactional partition
    fetch_trials: int
    restart_bytes: int            # size of the partition reopened in section 4
    restart_segment_bytes: int
    restart_trials: int


FULL = Sizes(raw_bytes=128 * MiB, raw_trials=5, append_batches=2560, append_trials=5,
             fetch_records=120_000, fetch_trials=7, restart_bytes=1024 * MiB,
             restart_segment_bytes=128 * MiB, restart_trials=3)
QUICK = Sizes(raw_bytes=32 * MiB, raw_trials=2, append_batches=320, append_trials=2,
              fetch_records=24_000, fetch_trials=3, restart_bytes=128 * MiB,
              restart_segment_bytes=16 * MiB, restart_trials=2)

SECTIONS = ("raw", "append", "fetch", "restart")


# -- results --------------------------------------------------------------------------


@dataclass
class Row:
    section: str
    name: str
    value: float
    unit: str
    note: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    goals: list[tuple[str, bool | None, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, section: str, name: str, value: float, unit: str, note: str = "") -> float:
        self.rows.append(Row(section, name, value, unit, note))
        print(f"  {name:<70} {_fmt(value):>10} {unit:<5} {note}", flush=True)
        return value

    def goal(self, what: str, met: bool | None, detail: str) -> None:
        self.goals.append((what, met, detail))

    def value(self, section: str, name: str) -> float | None:
        for row in self.rows:
            if row.section == section and row.name == name:
                return row.value
        return None


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    return f"[{_fmt(min(values))}..{_fmt(max(values))}]"


# -- the machine ----------------------------------------------------------------------


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, device, filesystem type) holding ``path``, from /proc/mounts."""
    best = ("?", "?", "?")
    resolved = str(path.resolve())
    try:
        with open("/proc/mounts") as f:
            for line in f:
                device, mount_point, fs_type = line.split()[:3]
                if (resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")) \
                        and len(mount_point) >= len(best[0] if best[0] != "?" else ""):
                    best = (mount_point, device, fs_type)
    except OSError:
        pass
    return best


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _git_revision() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "app", "storage"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + (" (exactly/app/ or exactly/storage/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def print_machine(workdir: Path, quick: bool) -> None:
    mount_point, device, fs_type = _mount_of(workdir)
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    print(f"date:       {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"command:    {' '.join([Path(sys.executable).name] + sys.argv)}")
    print(f"mode:       {'quick' if quick else 'full'}")
    print(f"machine:    nproc={os.cpu_count()} ({len(os.sched_getaffinity(0))} usable), "
          f"{mem_gib:.1f} GiB RAM, {_cpu_model()}")
    print(f"python:     {platform.python_implementation()} {platform.python_version()} "
          f"on {platform.system()} {platform.release()}")
    print(f"disk:       {workdir} on {device} ({fs_type}, mounted at {mount_point})")
    print(f"revision:   {_git_revision()}")
    print("units:      MB = 10**6 bytes; each figure is the median of its trials [min..max]")


# -- page cache -----------------------------------------------------------------------


def data_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def resident_fraction(paths: list[Path]) -> float | None:
    """Fraction of the bytes of ``paths`` in the page cache (fincore), None if unknown."""
    if not paths or shutil.which("fincore") is None:
        return None
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES,SIZE", *map(str, paths)],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    resident = size = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            resident += int(parts[0])
            size += int(parts[1])
    return resident / size if size else None


def evict_from_page_cache(paths: list[Path]) -> None:
    """Ask the kernel to drop the (clean) cached pages of ``paths`` -- no root needed.

    Only the guest's page cache: a virtual disk may still be cached by the host."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def load_into_page_cache(paths: list[Path]) -> None:
    """Read every byte of ``paths`` once, so the next reader finds them cached."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(8 * MiB):
                pass


def _cache_note(fraction: float | None) -> str:
    return "page cache: unknown" if fraction is None else f"{fraction:.0%} in page cache"


# -- batches --------------------------------------------------------------------------


def make_records(count: int, value: bytes, timestamp: int) -> list[SimpleRecord]:
    return [SimpleRecord(value=value, timestamp=timestamp) for _ in range(count)]


def idempotent_batches(producer_id: int, batches: int, records: list[SimpleRecord],
                       first_sequence: int = 0, transactional: bool = False) -> list[bytes]:
    """``batches`` consecutive batches of ``records`` from one producer (epoch 0)."""
    n = len(records)
    return [encode_batch(records, producer_id=producer_id, producer_epoch=0,
                         base_sequence=first_sequence + i * n, transactional=transactional)
            for i in range(batches)]


# -- 1. raw sequential write ----------------------------------------------------------


def raw_write(path: Path, total_bytes: int, sync_every: int | None, sync: Callable[[int], None],
              chunk: bytes) -> tuple[float, int]:
    """Append ``chunk`` until ``total_bytes``; ``sync`` every ``sync_every`` chunks
    (None: once at the end). Returns (seconds, syncs)."""
    chunks = total_bytes // len(chunk)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    syncs = 0
    try:
        start = time.perf_counter()
        for i in range(1, chunks + 1):
            os.write(fd, chunk)
            if sync_every is not None and i % sync_every == 0:
                sync(fd)
                syncs += 1
        if sync_every is None or chunks % sync_every:
            sync(fd)
            syncs += 1
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return elapsed, syncs


def bench_raw(report: Report, workdir: Path, sizes: Sizes) -> None:
    print("\n[1] raw sequential write, 100 KiB chunks, new file opened O_APPEND")
    chunk = os.urandom(RAW_CHUNK_BYTES)
    path = workdir / "raw.bin"
    variants: list[tuple[str, int | None, Callable[[int], None]]] = [
        ("fdatasync every chunk", 1, os.fdatasync),
        ("fsync every chunk (what FlushPlan.run calls)", 1, os.fsync),
        ("fdatasync every 4 chunks", 4, os.fdatasync),
        ("fdatasync every 16 chunks", 16, os.fdatasync),
        ("fdatasync every 64 chunks", 64, os.fdatasync),
        ("no sync until the end (page cache only)", None, os.fdatasync),
    ]
    results: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in variants}
    for _ in range(sizes.raw_trials):  # interleave variants so drift hits them alike
        for name, every, sync in variants:
            results[name].append(raw_write(path, sizes.raw_bytes, every, sync, chunk))
    for name, _, _ in variants:
        rates = [sizes.raw_bytes / s / MB for s, _ in results[name]]
        syncs_per_s = [n / s for s, n in results[name]]
        note = spread(rates)
        if name.endswith("every chunk"):
            note += f" {median(syncs_per_s):,.0f} syncs/s, {1e3 / median(syncs_per_s):.3f} ms each"
        report.add("raw", name, median(rates), "MB/s", note.strip())


# -- 2. acks=all append ---------------------------------------------------------------


@dataclass
class AppendTrial:
    seconds: float
    bytes: int
    fsyncs: int
    latencies: list[float]


def _produce_all(broker: Broker, topic: str, batches: list[bytes], acks: int,
                 latencies: list[float]) -> None:
    clock = time.perf_counter
    for batch in batches:
        t0 = clock()
        broker.produce(topic, 0, batch, acks=acks)
        latencies.append(clock() - t0)


def append_trial(broker: Broker, topic: str, per_thread: list[list[bytes]], acks: int) -> AppendTrial:
    broker.create_topic(topic, 1)
    latencies: list[list[float]] = [[] for _ in per_thread]
    errors: list[Exception] = []
    barrier = threading.Barrier(len(per_thread) + 1)

    def run(i: int) -> None:
        barrier.wait()
        try:
            _produce_all(broker, topic, per_thread[i], acks, latencies[i])
        except Exception as e:  # noqa: BLE001 -- handed to the main thread, which re-raises it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), name=f"producer-{i}")
               for i in range(len(per_thread))]
    for t in threads:
        t.start()
    gc.collect()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    commit = broker.engine.partitions._commits.get((topic, 0))
    fsyncs = commit.fsyncs if commit is not None else 0
    total = sum(len(b) for batches in per_thread for b in batches)
    expected = sum(len(batches) for batches in per_thread) * 100
    end = broker.list_offsets(topic, 0, -1)
    if acks == -1 and end != expected:
        raise AssertionError(f"{topic}: high watermark {end}, expected {expected}")
    broker.delete_topic(topic)
    return AppendTrial(elapsed, total, fsyncs, [x for lat in latencies for x in lat])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_append(report: Report, workdir: Path, sizes: Sizes) -> None:
    print("\n[2] Broker.produce of 100 x 1 KiB idempotent batches (encoded up front)")
    value = os.urandom(RECORD_VALUE_BYTES)
    records = make_records(100, value, int(time.time() * 1000))
    n = sizes.append_batches
    one = [idempotent_batches(1000, n, records)]
    four = [idempotent_batches(2000 + i, n // 4, records) for i in range(4)]
    batch_bytes = len(one[0][0])
    print(f"  (batch = {batch_bytes:,} bytes; {n} batches = {n * batch_bytes / MB:.0f} MB per trial)")
    variants = [("acks=-1, 1 producer thread", one, -1),
                ("acks=-1, 4 producer threads, same partition", four, -1),
                ("acks=1, 1 producer thread (no fsync wait)", one, 1)]
    trials: dict[str, list[AppendTrial]] = {name: [] for name, _, _ in variants}
    # The disk's speed drifts (a virtual disk more than most), so the baseline for the
    # ratio is measured here, one raw trial of the same bytes before each round.
    chunk = os.urandom(RAW_CHUNK_BYTES)
    raw_rates: list[float] = []
    data_dir = workdir / "append"
    with Broker(data_dir) as broker:
        for trial in range(sizes.append_trials):
            seconds, _ = raw_write(workdir / "raw.bin", n * batch_bytes, 1, os.fdatasync, chunk)
            raw_rates.append(n * batch_bytes / seconds / MB)
            for v, (name, per_thread, acks) in enumerate(variants):
                trials[name].append(append_trial(broker, f"append-{v}-{trial}", per_thread, acks))
    shutil.rmtree(data_dir, ignore_errors=True)
    raw = report.add("append", "baseline: raw fdatasync every 100 KiB chunk, between rounds",
                     median(raw_rates), "MB/s", spread(raw_rates))
    for name, _, acks in variants:
        runs = trials[name]
        rates = [t.bytes / t.seconds / MB for t in runs]
        rate = median(rates)
        report.add("append", f"{name}: throughput", rate, "MB/s", spread(rates))
        fsyncs = [t.fsyncs / t.seconds for t in runs]
        per_fsync = [len(t.latencies) / t.fsyncs for t in runs if t.fsyncs]
        report.add("append", f"{name}: fsyncs", median(fsyncs), "/s",
                   f"{median(per_fsync):.2f} batches per fsync" if per_fsync else "")
        lat = [x for t in runs for x in t.latencies]
        report.add("append", f"{name}: latency p50", _percentile(lat, 0.5) * 1e3, "ms",
                   f"p99 {_percentile(lat, 0.99) * 1e3:.2f} ms")
        if raw and acks == -1:
            ratio = rate / raw
            report.add("append", f"{name}: ratio to the baseline", ratio, "x")
            report.goal(f"append ({name}) >= {APPEND_GOAL_RATIO:.0%} of raw fdatasync",
                        ratio >= APPEND_GOAL_RATIO,
                        f"{rate:.0f} MB/s = {ratio:.0%} of {raw:.0f} MB/s")


# -- 3. read_uncommitted vs read_committed fetch ----------------------------------------

TXN_PRODUCERS = 4
TXN_BATCHES = 5          # batches per transaction
TXN_BATCH_RECORDS = 20   # records per batch
ABORT_EVERY = 100        # 1 transaction in 100 is aborted
RAW_FETCH_PASSES = 8     # whole-partition passes per trial of the undecoded variants


@dataclass
class TxnPartition:
    topic: str
    data_records: int
    committed_records: int
    transactions: int
    aborted: int
    batches: int
    size_bytes: int


def build_txn_partition(broker: Broker, topic: str, target_records: int) -> TxnPartition:
    """Four transactional producers, interleaved batch by batch and started one
    batch apart so their transactions overlap; 1 transaction in 100 is aborted.
    Each is a real transactional producer: InitProducerId, AddPartitionsToTxn at the
    start of each transaction, raw batches (acks=1), EndTxn."""
    broker.create_topic(topic, 1)
    tc = broker.engine._transaction_coordinator
    producers = [(f"bench-{p}", *broker.engine.call(tc.init_producer_id, f"bench-{p}", 900_000))
                 for p in range(TXN_PRODUCERS)]
    value = os.urandom(RECORD_VALUE_BYTES)
    records = make_records(TXN_BATCH_RECORDS, value, int(time.time() * 1000))
    sequences = [0] * TXN_PRODUCERS
    open_batches = [0] * TXN_PRODUCERS
    data = committed = transactions = aborted = batches = 0
    round_ = 0
    while data < target_records or any(open_batches):
        for p in range(TXN_PRODUCERS):
            if round_ < p or (data >= target_records and not open_batches[p]):
                continue
            txn_id, pid, epoch = producers[p]
            if not open_batches[p]:
                broker.engine.call(tc.add_partitions, txn_id, pid, epoch, [(topic, 0)])
            batch = encode_batch(records, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=sequences[p], transactional=True)
            broker.produce(topic, 0, batch, acks=1)
            sequences[p] += TXN_BATCH_RECORDS
            open_batches[p] += 1
            data += TXN_BATCH_RECORDS
            batches += 1
            if open_batches[p] == TXN_BATCHES:
                abort = transactions % ABORT_EVERY == ABORT_EVERY // 2
                broker.engine.call(tc.end_txn, txn_id, pid, epoch, not abort)
                transactions += 1
                aborted += abort
                if not abort:
                    committed += TXN_BATCHES * TXN_BATCH_RECORDS
                open_batches[p] = 0
        round_ += 1
    log = broker.engine._logs.log(topic, 0)
    if log.last_stable_offset != log.high_watermark or log.high_watermark != log.log_end_offset:
        raise AssertionError(f"LSO {log.last_stable_offset}, HW {log.high_watermark}, "
                             f"LEO {log.log_end_offset}: the partition is not fully stable")
    return TxnPartition(topic, data, committed, transactions, aborted, batches, log.size_bytes)


def fetch_all(broker: Broker, topic: str, committed: bool, decode: bool,
              passes: int = 1) -> tuple[float, int, int]:
    """Fetch the whole partition from offset 0 in 1 MiB chunks, ``passes`` times over;
    (seconds, bytes, records of one pass)."""
    isolation = "read_committed" if committed else "read_uncommitted"
    nbytes = nrecords = 0
    gc.collect()  # so that no variant pays for the garbage of the one before it
    start = time.perf_counter()
    for _ in range(passes):
        offset = nrecords = 0
        while True:
            result = broker.fetch(topic, 0, offset, 1 * MiB, isolation)
            if not result.records:
                break
            nbytes += len(result.records)
            if decode:
                nrecords += len(read_records(result.records, offset, committed,
                                             result.aborted_transactions or ()).records)
            offset = result.next_offset
    return time.perf_counter() - start, nbytes, nrecords


def bench_fetch(report: Report, workdir: Path, sizes: Sizes) -> None:
    print(f"\n[3] fetch a transactional partition from offset 0 in 1 MiB chunks "
          f"(1 in {ABORT_EVERY} transactions aborted)")
    data_dir = workdir / "fetch"
    with Broker(data_dir) as broker:
        t0 = time.perf_counter()
        part = build_txn_partition(broker, "txn", sizes.fetch_records)
        print(f"  (built in {time.perf_counter() - t0:.1f} s: {part.data_records:,} records of 1 KiB in "
              f"{part.batches:,} batches of {TXN_BATCH_RECORDS}, {part.transactions:,} transactions of "
              f"{TXN_BATCHES} batches by {TXN_PRODUCERS} interleaved producers, {part.aborted} aborted, "
              f"{part.size_bytes / MB:.0f} MB)")
        variants = [("(a) read_uncommitted, raw batches", False, False),
                    ("(b) read_committed, raw batches", True, False),
                    ("(c) read_uncommitted, decoded (read_records)", False, True),
                    ("(d) read_committed, decoded (read_records)", True, True)]
        fetch_all(broker, part.topic, False, False)  # warm up the page cache and the code
        cache = resident_fraction(data_files(data_dir / "txn-0"))
        runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name, _, _ in variants}
        for trial in range(sizes.fetch_trials):
            # rotate the order each trial so no variant always follows the same one
            for name, committed, decode in variants[trial % 4:] + variants[:trial % 4]:
                passes = 1 if decode else RAW_FETCH_PASSES  # raw passes are short: repeat them
                runs[name].append(fetch_all(broker, part.topic, committed, decode, passes))
    shutil.rmtree(data_dir, ignore_errors=True)
    rates: dict[str, float] = {}
    for name, committed, decode in variants:
        mbps = [b / s / MB for s, b, _ in runs[name]]
        rates[name] = median(mbps)
        note = spread(mbps)
        if decode:
            got = runs[name][0][2]
            want = part.committed_records if committed else part.data_records
            if got != want:
                raise AssertionError(f"{name}: {got} records, expected {want}")
            recs = [r / s for s, _, r in runs[name]]
            note += f" {median(recs):,.0f} records/s ({got:,} records)"
        report.add("fetch", name, rates[name], "MB/s", note.strip())
    report.notes.append(f"fetch: partition read with a warm page cache ({_cache_note(cache)})")
    for label, uncommitted, committed in (("raw", variants[0][0], variants[1][0]),
                                          ("decoded", variants[2][0], variants[3][0])):
        ratio = rates[committed] / rates[uncommitted]
        report.add("fetch", f"ratio read_committed / read_uncommitted ({label})", ratio, "x")
        report.goal(f"read_committed >= {FETCH_GOAL_RATIO:.0%} of read_uncommitted ({label})",
                    ratio >= FETCH_GOAL_RATIO,
                    f"{rates[committed]:.0f} / {rates[uncommitted]:.0f} MB/s = {ratio:.0%}")


# -- 4. restart ------------------------------------------------------------------------


def write_restart_partition(data_dir: Path, sizes: Sizes) -> tuple[int, int]:
    """Fill one partition with ``sizes.restart_bytes`` of idempotent batches; close cleanly.
    Returns (log end offset, segments)."""
    value = os.urandom(RECORD_VALUE_BYTES)
    records = make_records(100, value, int(time.time() * 1000))
    with Broker(data_dir, **{"segment.bytes": sizes.restart_segment_bytes}) as broker:
        broker.create_topic("restart", 1)
        written, sequence, pid = 0, 0, 4000
        while written < sizes.restart_bytes:
            batch = encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=sequence)
            # acks=1 keeps the fill quick; group commit still fsyncs behind it (flush.ms=0)
            broker.produce("restart", 0, batch, acks=1)
            sequence += len(records)
            written += len(batch)
        log = broker.engine._logs.log("restart", 0)
        leo, segments = log.log_end_offset, len(log.segments)
    return leo, segments


def reopen(data_dir: Path, sizes: Sizes, expected_leo: int) -> float:
    """Seconds to construct the Broker (the recovery), then a clean close (not timed)."""
    gc.collect()
    start = time.perf_counter()
    broker = Broker(data_dir, **{"segment.bytes": sizes.restart_segment_bytes})
    elapsed = time.perf_counter() - start
    try:
        leo = broker.engine._logs.log("restart", 0).log_end_offset
        if leo != expected_leo:
            raise AssertionError(f"reopened with log end offset {leo}, expected {expected_leo}")
    finally:
        broker.close()
    return elapsed


def bench_restart(report: Report, workdir: Path, sizes: Sizes) -> None:
    print(f"\n[4] restart: Broker(...) over one {sizes.restart_bytes / MiB:.0f} MiB partition "
          f"(segment.bytes = {sizes.restart_segment_bytes / MiB:.0f} MiB)")
    data_dir = workdir / "restart"
    part_dir = data_dir / "restart-0"
    t0 = time.perf_counter()
    leo, segments = write_restart_partition(data_dir, sizes)
    log_bytes = sum(p.stat().st_size for p in part_dir.glob("*.log"))
    active = max(part_dir.glob("*.log")).stat().st_size
    print(f"  (written in {time.perf_counter() - t0:.1f} s: {log_bytes / MiB:.0f} MiB, {leo:,} records, "
          f"{segments} segments, active segment {active / MiB:.1f} MiB)")

    def remove_snapshots() -> None:
        for snapshot in part_dir.glob("*" + filenames.SNAPSHOT_SUFFIX):
            snapshot.unlink()

    def remove_clean_marker() -> None:
        (data_dir / filenames.CLEAN_SHUTDOWN_FILE).unlink()

    def unclean_from_zero() -> None:
        remove_clean_marker()
        checkpoint = data_dir / filenames.RECOVERY_POINT_CHECKPOINT
        points = read_checkpoint(checkpoint)
        write_checkpoint(checkpoint, {key: 0 for key in points})

    # (b) goes last: reopening without snapshots leaves only the one at the log end,
    # which would change what (c) and (d) load.
    variants: list[tuple[str, Callable[[], None], str]] = [
        ("(a) clean, fresh snapshot", lambda: None, "clean"),
        ("(c) unclean (no clean-shutdown file), from recovery point",
         remove_clean_marker, f"CRC-checks the active segment, {active / MiB:.1f} MiB"),
        ("(d) unclean, recovery point reset to 0", unclean_from_zero,
         f"worst case: CRC-checks all {log_bytes / MiB:.0f} MiB"),
        ("(b) clean, every *.snapshot deleted", remove_snapshots, "replays every batch header"),
    ]
    for name, prepare, what in variants:
        warm: list[float] = []
        caches: list[float | None] = []
        load_into_page_cache(data_files(data_dir))  # undo the previous variant's eviction
        for _ in range(sizes.restart_trials):
            prepare()
            caches.append(resident_fraction(data_files(part_dir)))
            warm.append(reopen(data_dir, sizes, leo))
        prepare()
        evict_from_page_cache(data_files(data_dir))
        cold_cache = resident_fraction(data_files(part_dir))
        cold = reopen(data_dir, sizes, leo)
        known = [c for c in caches if c is not None]
        warm_note = f"{what}; {_cache_note(min(known) if known else None)} {spread(warm)}"
        report.add("restart", f"{name}, warm cache", median(warm), "s", warm_note.strip())
        report.add("restart", f"{name}, cold", cold, "s",
                   f"{_cache_note(cold_cache)} after POSIX_FADV_DONTNEED")
    shutil.rmtree(data_dir, ignore_errors=True)
    report.notes.append(
        "restart: 'warm' = the files were just written or read and sit in the page cache; "
        "'cold' = every file's pages dropped with posix_fadvise(DONTNEED) first "
        "(no root needed), but a virtual disk may still be cached by the host, so cold "
        "figures are a lower bound on a real cold start")
    fresh = report.value("restart", "(a) clean, fresh snapshot, warm cache")
    fresh_cold = report.value("restart", "(a) clean, fresh snapshot, cold")
    scale = "" if sizes.restart_bytes >= 1024 * MiB else \
        f" (measured on {sizes.restart_bytes / MiB:.0f} MiB, not 1 GiB: --quick)"
    assert fresh is not None and fresh_cold is not None
    report.goal(f"restart with a fresh snapshot < {RESTART_GOAL_SECONDS:.0f} s for 1 GiB",
                max(fresh, fresh_cold) < RESTART_GOAL_SECONDS,
                f"{fresh:.3f} s warm, {fresh_cold:.3f} s cold{scale}")


# -- main --------------------------------------------------------------------------------


def print_table(report: Report) -> None:
    width = max(len(row.name) for row in report.rows) if report.rows else 20
    rule = 8 + 1 + width + 1 + 10 + 1 + 5
    print("\n" + "=" * rule)
    print(f"{'section':<8} {'figure':<{width}} {'value':>10} {'unit':<5}")
    print("-" * rule)
    for row in report.rows:
        print(f"{row.section:<8} {row.name:<{width}} {_fmt(row.value):>10} {row.unit:<5}")
    print("=" * rule)
    for note in report.notes:
        print(f"note: {note}")
    print("\nsummary:")
    for what, met, detail in report.goals:
        verdict = "n/a" if met is None else ("MET" if met else "NOT MET")
        print(f"  [{verdict:^7}] {what}: {detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 5 s); for checking the script, not for figures")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections to run, of {', '.join(SECTIONS)}")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work",
                        help="where the data goes (default bench/.work/); must be on the disk to measure")
    parser.add_argument("--keep", action="store_true", help="do not delete the data afterwards")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}")
    sizes = QUICK if args.quick else FULL

    args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir / f"run-{os.getpid()}"
    workdir.mkdir()
    print_machine(workdir, args.quick)
    if os.stat(workdir).st_dev != os.stat(ROOT).st_dev:
        print(f"warning:    {workdir} is not on the repository's filesystem")
    report = Report()
    started = time.perf_counter()
    try:
        if "raw" in only:
            bench_raw(report, workdir, sizes)
        if "append" in only:
            bench_append(report, workdir, sizes)
        if "fetch" in only:
            bench_fetch(report, workdir, sizes)
        if "restart" in only:
            bench_restart(report, workdir, sizes)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            with contextlib.suppress(OSError):
                args.workdir.rmdir()  # only if nothing else is in it
    print_table(report)
    print(f"\ntotal time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
