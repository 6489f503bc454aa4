"""Every file name in a data directory, and nothing else, is decided here.

Kafka's layout (``LogFileUtils``): a partition is a directory ``<topic>-<partition>``;
each segment is named by its base offset as 20 zero-padded digits, so that ``ls``
sorts numerically, with one file per suffix::

    00000000000000000000.log        record batches (exactly/storage/segment.py, record_batch.py)
    00000000000000000000.index      sparse offset index (exactly/storage/offset_index.py)
    00000000000000000000.timeindex  sparse time index (exactly/storage/time_index.py)
    00000000000000000000.txnindex   aborted transactions (exactly/storage/txn_index.py)
    00000000000000000123.snapshot   producer state at offset 123 (exactly/storage/producer_snapshot.py)
    partition.metadata              the topic's id (exactly/storage/partition_metadata.py)

A file being deleted is first renamed with ``.deleted`` appended; a file being
written whole is written as ``.tmp`` then renamed. Both are cleaned up on start.

The log cleaner (``exactly/storage/log_cleaner.py``) writes a cleaned segment under its
segment's names with ``.cleaned`` appended (``00000000000000000000.log.cleaned``),
renames every file to ``.swap`` -- the ``.log.swap`` last: its rename is the
commit point -- and then over the segment(s) it replaces. On start a ``.cleaned``
file, or a ``.swap`` file without its ``.log.swap``, is deleted; a ``.log.swap``
is completed (``segment_swap.complete_swap_files``). Which offsets are clean is in the
data directory's ``cleaner-offset-checkpoint`` (Kafka's name and format).

The data directory itself holds, beside the partition directories (Kafka's names
where Kafka has the file)::

    .lock                              held by the one process that owns the directory
    meta.properties                    cluster.id, node.id, version
    .kafka_cleanshutdown               present only between a clean shutdown and the next start
    recovery-point-offset-checkpoint   } Kafka's text checkpoints (exactly/storage/checkpoint.py)
    log-start-offset-checkpoint        }
    cleaner-offset-checkpoint          }
    topics.json                        the topic registry (exactly/storage/log_manager.py)
    producer-id-block                  end of the producer-id block handed out
                                       (exactly/coordinator/producer_id_manager.py)
    transaction-coordinator-epoch      the coordinator epoch of the last start
                                       (exactly/coordinator/transaction_coordinator.py)
    exactly.db                         the SQLite mirror, with SQLite's -wal and -shm
                                       files beside it (exactly/coordinator/mirror_db.py)
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
TEMP_SUFFIX = ".tmp"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

#: Partition-directory level file (Kafka's name): the topic id.
PARTITION_METADATA = "partition.metadata"

#: Segment file suffixes, log first.
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

#: Data-directory level files (Kafka's names).
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
META_PROPERTIES = "meta.properties"
TOPICS_FILE = "topics.json"
PRODUCER_ID_BLOCK = "producer-id-block"
COORDINATOR_EPOCH = "transaction-coordinator-epoch"
MIRROR_DB = "exactly.db"

_OFFSET_NAME = re.compile(r"^(\d{20})(\.[a-z]+)$")
_SWAP_NAME = re.compile(r"^(\d{20})(\.[a-z]+)\.swap$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def offset_name(offset: int, suffix: str) -> str:
    """``offset`` as 20 zero-padded digits followed by ``suffix``."""
    if offset < 0:
        raise ValueError(f"file offsets are non-negative, got {offset}")
    return f"{offset:020d}{suffix}"


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / offset_name(base_offset, suffix)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / offset_name(offset, SNAPSHOT_SUFFIX)


def parse_offset_name(name: str) -> tuple[int, str] | None:
    """``(offset, suffix)`` for a 20-digit offset file name, else None."""
    match = _OFFSET_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def parse_swap_name(name: str) -> tuple[int, str] | None:
    """``(base offset, segment suffix)`` for a segment file name ending in ``.swap``
    (``00000000000000000042.index.swap`` -> ``(42, ".index")``), else None."""
    match = _SWAP_NAME.match(name)
    if match is None or match.group(2) not in SEGMENT_SUFFIXES:
        return None
    return int(match.group(1)), match.group(2)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a partition directory name, else None."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))
