"""The process tests/test_crash_recovery.py kills: it produces until SIGKILLed.

Run from the repository root::

    python -m tests.crash_child DATA_DIR ACK_FILE SEED [--checkpoint-every N]

It opens DATA_DIR on the storage layer (``tests/storage_log.py``: a LogManager whose
every append is fsynced before it returns, as ``acks=-1``) with small segments,
recovering whatever the last kill left, creates the topic if it is missing, learns
where its producers left off and produces forever:

* producer ``IDEMPOTENT_ID`` (epoch 0): idempotent batches of random sizes, some
  multi-record, some gzip, with consecutive sequences;
* producer ``TRANSACTIONAL_ID`` (epoch 0): transactional batches, each
  transaction ended by a COMMIT or ABORT marker (``write_txn_marker``), written
  to the partition directly: what recovery must keep is the log's, whoever wrote it.

Where they left off comes from the broker's producer state, and is cross-checked
against a scan of the log; a mismatch exits with status 2. On start it also
resends one of the idempotent producer's last five batches, which must be answered
as a duplicate with its original offset (status 3 otherwise). Any other failure,
e.g. an OUT_OF_ORDER_SEQUENCE_NUMBER because recovery lost track of a sequence,
ends the process with a traceback, which the test reports.

After each acknowledged append (never before ``produce``/``write_txn_marker``
returned) it appends one line to ACK_FILE and flushes it::

    S <log end offset>                                           started; recovery done
    D <offset> <producer id> <base sequence> <count> <sha256>   idempotent batch
    T <offset> <producer id> <base sequence> <count> <sha256>   transactional batch
    M <offset> <producer id> COMMIT|ABORT                       transaction marker
    R <offset> <producer id> <base sequence>                    a resend answered as a duplicate

``sha256`` is :func:`record_digest` of the records' keys, values and headers.
``--checkpoint-every N`` writes the recovery-point checkpoint every N appends, as
the broker's scheduled job does, so a kill recovers from a recent recovery point.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from exactly.storage.background import run_inline
from exactly.storage.compression import Compression
from exactly.storage.producer_state import next_sequence
from exactly.storage.record_batch import (
    ControlType,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    encode_batch,
    iter_headers,
    read_header,
)
from tests.storage_log import DurableLogs

TOPIC = "crash"
IDEMPOTENT_ID = 1
TRANSACTIONAL_ID = 2
EPOCH = 0
COORDINATOR_EPOCH = 0
CONFIG = {"segment.bytes": 64 * 1024, "index.interval.bytes": 1024}
#: a child the test forgot to kill stops by itself
LIFETIME_S = 120


def record_digest(records: Iterable[Any]) -> str:
    """SHA-256 over every record's key, value and headers (SimpleRecord or decoded
    Record), each field length-prefixed, -1 for None."""
    digest = hashlib.sha256()

    def put(data: bytes | None) -> None:
        if data is None:
            digest.update(struct.pack(">i", -1))
        else:
            digest.update(struct.pack(">i", len(data)) + data)

    for record in records:
        put(record.key)
        put(record.value)
        digest.update(struct.pack(">i", len(record.headers)))
        for header_key, header_value in record.headers:
            put(header_key.encode("utf-8"))
            put(header_value)
    return digest.hexdigest()


def stored_batches(logs: DurableLogs, max_bytes: int = 1 << 20) -> Iterator[bytes]:
    """Every batch below the high watermark, by read_uncommitted fetches from 0."""
    offset = 0
    while True:
        result = logs.fetch(TOPIC, 0, offset, max_bytes=max_bytes)
        if not result.records:
            return
        for position, header in iter_headers(result.records):
            yield result.records[position:position + header.size]
        offset = result.next_offset


class LogScan:
    """Where each producer stands, learnt from the batches in the log."""

    def __init__(self, batches: Iterable[bytes]) -> None:
        self.last_sequence = {IDEMPOTENT_ID: -1, TRANSACTIONAL_ID: -1}
        self.open_txn_first_offset: int | None = None
        self.recent_idempotent: list[tuple[int, bytes]] = []  # (offset, stored batch)
        for batch in batches:
            header = read_header(batch)
            if header.is_control:
                control_type, _ = decode_control_record(decode_batch(batch).records[0])
                if header.producer_id == TRANSACTIONAL_ID and control_type in (
                        ControlType.COMMIT, ControlType.ABORT):
                    self.open_txn_first_offset = None
                continue
            if header.producer_id in self.last_sequence:
                self.last_sequence[header.producer_id] = header.last_sequence
            if header.producer_id == IDEMPOTENT_ID:
                self.recent_idempotent = (self.recent_idempotent + [(header.base_offset, batch)])[-5:]
            if header.is_transactional and self.open_txn_first_offset is None:
                self.open_txn_first_offset = header.base_offset


def random_records(rng: random.Random) -> list[SimpleRecord]:
    count = rng.choice([1, 1, 1, 2, 3, 5, 8, 20])
    records = []
    for i in range(count):
        size = rng.choice([0, 10, 100, 700, 2000, 6000]) // rng.choice([1, 1, 2, count])
        if rng.random() < 0.5:
            value: bytes | None = rng.randbytes(size)
        else:  # compressible
            value = bytes([rng.randrange(256)]) * size
        if rng.random() < 0.05:
            value = None  # a tombstone
        key = None if rng.random() < 0.2 else b"key-%d" % rng.randrange(1000)
        headers = tuple((f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randrange(8)))
                        for j in range(rng.choice([0, 0, 1, 2])))
        records.append(SimpleRecord(value, key=key, headers=headers))
    return records


class Child:
    def __init__(self, logs: DurableLogs, ack_file: Any, rng: random.Random) -> None:
        self.logs = logs
        self.ack_file = ack_file
        self.rng = rng
        self.next_sequence: dict[int, int] = {}
        self.txn_open = False

    def ack(self, line: str) -> None:
        self.ack_file.write(line + "\n")
        self.ack_file.flush()

    def learn_where_producers_left_off(self) -> int:
        """Next sequences and the open transaction from producer state, checked against
        the log; returns the log end offset."""
        log = self.logs.log(TOPIC, 0)
        state: dict[int, tuple[int, int | None]] = {}
        for pid in (IDEMPOTENT_ID, TRANSACTIONAL_ID):
            entry = log.producer_state.producers.get(pid)
            state[pid] = (entry.last_seq, entry.current_txn_first_offset) if entry else (-1, None)
        log_end = log.log_end_offset
        scan = LogScan(stored_batches(self.logs))
        for pid in (IDEMPOTENT_ID, TRANSACTIONAL_ID):
            if state[pid][0] != scan.last_sequence[pid]:
                sys.exit(f"producer {pid}: producer state says last sequence {state[pid][0]}, "
                         f"the log says {scan.last_sequence[pid]}")
            self.next_sequence[pid] = next_sequence(state[pid][0])
        if state[TRANSACTIONAL_ID][1] != scan.open_txn_first_offset:
            sys.exit(f"open transaction: producer state says {state[TRANSACTIONAL_ID][1]}, "
                     f"the log says {scan.open_txn_first_offset}")
        self.txn_open = scan.open_txn_first_offset is not None
        if scan.recent_idempotent:
            offset, batch = self.rng.choice(scan.recent_idempotent)
            answered = self.logs.produce(TOPIC, 0, batch)
            if answered != offset:
                print(f"resent batch at offset {offset} was answered with offset {answered}",
                      file=sys.stderr)
                sys.exit(3)
            self.ack(f"R {offset} {IDEMPOTENT_ID} {read_header(batch).base_sequence}")
        return log_end

    def produce(self, pid: int, transactional: bool) -> None:
        records = random_records(self.rng)
        gzip = self.rng.random() < 0.3
        sequence = self.next_sequence[pid]
        batch = encode_batch(records, producer_id=pid, producer_epoch=EPOCH, base_sequence=sequence,
                             transactional=transactional,
                             compression=Compression.GZIP if gzip else Compression.NONE)
        offset = self.logs.produce(TOPIC, 0, batch)
        self.next_sequence[pid] = sequence + len(records)
        kind = "T" if transactional else "D"
        self.ack(f"{kind} {offset} {pid} {sequence} {len(records)} {record_digest(records)}")

    def end_transaction(self, commit: bool) -> None:
        offset = self.logs.write_txn_marker(TOPIC, 0, TRANSACTIONAL_ID, EPOCH, COORDINATOR_EPOCH,
                                              commit)
        self.txn_open = False
        self.ack(f"M {offset} {TRANSACTIONAL_ID} {'COMMIT' if commit else 'ABORT'}")

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.65:
            self.produce(IDEMPOTENT_ID, transactional=False)
        elif self.txn_open and roll < 0.8:
            self.end_transaction(commit=self.rng.random() < 0.5)
        else:
            self.produce(TRANSACTIONAL_ID, transactional=True)
            self.txn_open = True


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("ack_file", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    deadline = time.monotonic() + LIFETIME_S
    logs = DurableLogs(args.data_dir, **CONFIG)
    with open(args.ack_file, "a") as ack_file:
        if TOPIC not in logs.logs.topics:
            logs.create_topic(TOPIC, 1)
        child = Child(logs, ack_file, rng)
        child.ack(f"S {child.learn_where_producers_left_off()}")
        appends = 0
        while time.monotonic() < deadline:
            child.step()
            appends += 1
            if args.checkpoint_every and appends % args.checkpoint_every == 0:
                run_inline(logs.logs.checkpoint())
    logs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
