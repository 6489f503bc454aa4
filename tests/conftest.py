"""Shared fixtures: a broker on a temporary data directory, and batch builders."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import pytest

from app import Broker
from storage.clock import FakeClock
from storage.record_batch import SimpleRecord, encode_batch

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    with Broker(tmp_path / "data", clock=clock) as b:
        yield b


def data_batch(values: Sequence[bytes], producer_id: int = -1, epoch: int = -1, sequence: int = -1,
               transactional: bool = False, timestamp: int | None = None) -> bytes:
    """A producer's batch of ``values`` (keys k0, k1, ...)."""
    records = [SimpleRecord(v, key=b"k%d" % i, timestamp=timestamp) for i, v in enumerate(values)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, transactional=transactional)
