"""The coordinator epoch file (``transaction-coordinator-epoch``): versioned and
checksummed, and never the only memory of the epoch -- a lost or damaged file must
not make the partitions fence the coordinator's own later markers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import pytest

from exactly.app import Broker
from exactly.storage import checked_file
from exactly.storage.filenames import COORDINATOR_EPOCH
from exactly.storage.read_committed import read_records
from tests.conftest import SMALL_INTERNAL_TOPICS

TOPIC = "orders"
PARTITIONS = 2


def delete(path: Path) -> None:
    path.unlink()


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:5])


def garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x5A  # the epoch itself: only the CRC can tell
    path.write_bytes(bytes(data))


def committed_values(broker: Broker) -> list[bytes]:
    values = []
    for partition in range(PARTITIONS):
        r = broker.fetch(TOPIC, partition, 0, isolation_level="read_committed")
        values += [rec.value for rec in read_records(r.records, 0, True, r.aborted_transactions).records]
    return sorted(values)


@pytest.mark.parametrize("damage", [delete, truncate, garble])
def test_every_transaction_after_a_lost_or_damaged_epoch_file_commits_and_is_visible(
        tmp_path: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    expected: list[bytes] = []
    epochs = []
    for round_ in range(4):
        with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
            if round_ == 0:
                broker.create_topic(TOPIC, partitions=PARTITIONS)
            epochs.append(broker.engine.transactions.coordinator.coordinator_epoch)
            # the same transactional id every round: the partitions remember the coordinator
            # epoch of its last marker, and a lower one is TRANSACTION_COORDINATOR_FENCED
            producer = broker.producer(transactional_id="billing")
            producer.init_transactions()
            for txn in range(3):
                producer.begin_transaction()
                for partition in range(PARTITIONS):
                    value = b"r%d-t%d-p%d" % (round_, txn, partition)
                    producer.send(TOPIC, value, partition=partition)
                    expected.append(value)
                producer.commit_transaction()
            assert committed_values(broker) == sorted(expected), f"round {round_}"
            lso = [broker.list_offsets(TOPIC, p, -1, "read_committed") for p in range(PARTITIONS)]
            assert lso == [broker.list_offsets(TOPIC, p, -1) for p in range(PARTITIONS)], "the LSO is pinned"
        if round_ > 0:
            damage(data / COORDINATOR_EPOCH)
    assert epochs == sorted(set(epochs)), f"the coordinator epoch went back: {epochs}"
    if damage is not delete:
        assert any(COORDINATOR_EPOCH in r.getMessage() for r in caplog.records
                   if r.levelno == logging.WARNING), "the damage was not reported"


def test_the_epoch_file_is_versioned_and_checksummed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        epoch = broker.engine.transactions.coordinator.coordinator_epoch
    raw = (data / COORDINATOR_EPOCH).read_bytes()
    assert checked_file.unframe(raw, version=0) == epoch.to_bytes(4, "big")
    for version in (1, -1):
        with pytest.raises(checked_file.CorruptFileError, match="version"):
            checked_file.unframe(raw, version)
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        assert broker.engine.transactions.coordinator.coordinator_epoch == epoch + 1
