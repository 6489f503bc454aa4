"""The version + CRC-32C framing of the whole files the broker owns
(``exactly/storage/checked_file.py``), and what its owners do with a damaged file."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactly.app import Broker
from exactly.storage.checked_file import HEADER, CorruptFileError, frame, read_fields, unframe, write_fields
from exactly.storage.filenames import PRODUCER_ID_BLOCK
from tests.conftest import SMALL_INTERNAL_TOPICS

versions = st.integers(-(2 ** 15), 2 ** 15 - 1)


@given(versions, st.binary(max_size=200))
def test_round_trip_and_size(version: int, body: bytes) -> None:
    data = frame(version, body)
    assert len(data) == HEADER.size + len(body)
    assert unframe(data, version) == body


@given(st.binary(min_size=1, max_size=40), st.data())
def test_any_flipped_bit_after_the_version_is_corrupt(body: bytes, data: st.DataObject) -> None:
    framed = bytearray(frame(0, body))
    position = data.draw(st.integers(2, len(framed) - 1))  # the CRC or the body
    framed[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptFileError, match="CRC"):
        unframe(bytes(framed), 0)


def test_every_truncation_is_corrupt() -> None:
    framed = frame(0, struct.pack(">q", 2000))
    for size in range(len(framed)):
        with pytest.raises(CorruptFileError):
            unframe(framed[:size], 0)


def test_another_version_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "f"
    body = struct.Struct(">q")
    write_fields(path, 1, body, 7)
    with pytest.raises(CorruptFileError, match="unknown version 1") as raised:
        read_fields(path, 0, body)
    assert raised.value.path == path
    assert read_fields(path, 1, body) == (7,)
    assert read_fields(tmp_path / "missing", 0, body) is None
    with pytest.raises(CorruptFileError, match="body of 8 bytes"):
        read_fields(path, 1, struct.Struct(">i"))


@pytest.mark.parametrize("damage", [b"", b"\x00\x00garbage!", b"\x00" * 14])
def test_a_damaged_producer_id_block_never_gives_an_id_twice(tmp_path: Path, damage: bytes) -> None:
    data = tmp_path / "data"
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        before = [broker.engine.call(broker.engine.transactions.coordinator.init_producer_id, None, -1)[0]
                  for _ in range(3)]
    (data / PRODUCER_ID_BLOCK).write_bytes(damage)
    with Broker(data, **SMALL_INTERNAL_TOPICS) as broker:
        after = broker.engine.call(broker.engine.transactions.coordinator.init_producer_id, None, -1)[0]
    assert after > max(before)
