"""The broker tests/test_cleaner_process.py kills in the middle of a cleaning round.

Run from the repository root::

    python -m tests.cleaner_child DATA_DIR PID_FILE BATCHES PER_BATCH KEYS

It opens a broker on DATA_DIR (no scheduled jobs), fills the compacted partition
``big-0`` with :func:`fill`, rolls it, starts a cleaning round, and writes the pid of
the engine's worker process to PID_FILE (write-then-rename) once it has started;
then it waits to be killed.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Callable

from exactly.storage.record_batch import SimpleRecord, encode_batch

TOPIC = "big"
#: 1 MiB segments: a round writes a cleaned segment for each, one after another
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 1 << 20}


def fill(produce: Callable[[bytes, int], object], batches: int, per_batch: int,
         keys: int) -> dict[bytes, bytes]:
    """Produce ``batches`` batches of ``per_batch`` records of about 100 bytes, cycling
    over ``keys`` keys, with ``produce(batch, acks)`` (the last one acks=-1: all of it
    is durable); returns each key's last value."""
    latest: dict[bytes, bytes] = {}
    for n in range(batches):
        records = []
        for i in range(per_batch):
            key, value = b"k%d" % ((n * per_batch + i) % keys), b"v%d-" % n + b"." * 90
            records.append(SimpleRecord(value, key=key))
            latest[key] = value
        produce(encode_batch(records), -1 if n == batches - 1 else 1)
    return latest


def main(data: str, pid_file: str, batches: str, per_batch: str, keys: str) -> None:
    from exactly.app import Broker

    broker = Broker(data, **{"exactly.jobs.enable": False})
    broker.create_topic(TOPIC, 1, COMPACTED)
    fill(lambda batch, acks: broker.produce(TOPIC, 0, batch, acks=acks), int(batches), int(per_batch), int(keys))
    engine = broker.engine
    engine.call(lambda: engine.partitions.log(TOPIC, 0).roll())
    threading.Thread(target=lambda: engine.call(engine.jobs.compact_logs, timeout=None), daemon=True).start()
    while engine.maintenance.process.pid is None:
        threading.Event().wait(0.001)  # polling for the worker to start; the test's deadline bounds it
    Path(pid_file + ".tmp").write_text(str(engine.maintenance.process.pid))
    os.rename(pid_file + ".tmp", pid_file)
    threading.Event().wait()


if __name__ == "__main__":
    main(*sys.argv[1:])
