"""Topic ids (KIP-516) on disk: every topic's id in ``topics.json`` and in each of its
partition directories' ``partition.metadata``, in Kafka's format, kept across restarts,
written for directories from before topic ids, new for a topic created again, and a
partition directory naming another id refused as Kafka refuses it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from exactly.storage import filenames, partition_metadata, topic_id
from exactly.storage.background import run_inline
from exactly.storage.clock import FakeClock
from exactly.storage.errors import KafkaStorageError
from exactly.storage.log_config import LogConfig
from exactly.storage.log_manager import LogManager

pytestmark = pytest.mark.timeout(60)


def _open(data: Path) -> LogManager:
    return LogManager(data, LogConfig(), FakeClock())


def _metadata_files(data: Path, topic: str, partitions: int) -> list[str]:
    return [(data / filenames.partition_dir_name(topic, p) / filenames.PARTITION_METADATA).read_text()
            for p in range(partitions)]


def test_a_new_topic_has_kafkas_partition_metadata_in_every_partition(tmp_path):
    logs = _open(tmp_path)
    info = run_inline(logs.create_topic("orders", 3))
    logs.close()
    text = f"version: 0\ntopic_id: {topic_id.to_string(info.topic_id)}"
    assert _metadata_files(tmp_path, "orders", 3) == [text] * 3
    assert len(topic_id.to_string(info.topic_id)) == 22
    registry = json.loads((tmp_path / filenames.TOPICS_FILE).read_text())
    assert registry["orders"]["topic_id"] == topic_id.to_string(info.topic_id)


def test_the_id_survives_a_restart_and_a_grown_topic_keeps_it(tmp_path):
    logs = _open(tmp_path)
    created = run_inline(logs.create_topic("orders", 1))
    run_inline(logs.add_partitions("orders", 2))
    logs.close(clean=False)
    reopened = _open(tmp_path)
    assert reopened.topic("orders").topic_id == created.topic_id
    reopened.close()
    assert len(set(_metadata_files(tmp_path, "orders", 2))) == 1


def test_a_topic_created_again_gets_a_new_id(tmp_path):
    logs = _open(tmp_path)
    first = run_inline(logs.create_topic("orders", 2))
    run_inline(logs.delete_topic(logs.detach_topic("orders")))
    second = run_inline(logs.create_topic("orders", 1))
    logs.close()
    assert second.topic_id != first.topic_id
    assert _metadata_files(tmp_path, "orders", 1) == [partition_metadata.encode(second.topic_id).decode()]


def test_a_data_directory_from_before_topic_ids_gets_them_on_open(tmp_path):
    """Exactly's registry held hex UUIDs and no partition.metadata: the id is kept,
    every partition gets the file, the registry is read as it was written."""
    logs = _open(tmp_path)
    info = run_inline(logs.create_topic("old", 2))
    logs.close()
    registry = json.loads((tmp_path / filenames.TOPICS_FILE).read_text())
    registry["old"]["topic_id"] = str(info.topic_id)
    (tmp_path / filenames.TOPICS_FILE).write_text(json.dumps(registry))
    for p in range(2):
        (tmp_path / filenames.partition_dir_name("old", p) / filenames.PARTITION_METADATA).unlink()
    reopened = _open(tmp_path)
    assert reopened.topic("old").topic_id == info.topic_id
    reopened.close()
    assert _metadata_files(tmp_path, "old", 2) == [partition_metadata.encode(info.topic_id).decode()] * 2


def test_a_partition_naming_another_topic_id_is_refused_at_open(tmp_path):
    logs = _open(tmp_path)
    run_inline(logs.create_topic("orders", 1))
    logs.close()
    stranger = topic_id.new_topic_id()
    partition_metadata.write(tmp_path / filenames.partition_dir_name("orders", 0), stranger)
    with pytest.raises(partition_metadata.InconsistentTopicIdError, match=topic_id.to_string(stranger)):
        _open(tmp_path)


@pytest.mark.parametrize("content", ["", "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "version: 0\n",
                                     "version: 0\ntopic_id: not-an-id", "version 0 topic_id"])
def test_a_damaged_partition_metadata_file_is_a_storage_error_naming_it(tmp_path, content):
    logs = _open(tmp_path)
    run_inline(logs.create_topic("orders", 1))
    logs.close()
    file = tmp_path / filenames.partition_dir_name("orders", 0) / filenames.PARTITION_METADATA
    file.write_text(content)
    with pytest.raises(KafkaStorageError, match="partition.metadata"):
        _open(tmp_path)


def test_kafkas_own_file_is_read_as_kafka_wrote_it(tmp_path):
    """A file as Kafka 4.4 writes it (no newline after the id) and with one (lenient)."""
    topic = uuid.UUID("bbcfd575-9bd8-47b1-91ca-7096d94473de")
    for text in ("version: 0\ntopic_id: u8_VdZvYR7GRynCW2URz3g", "version: 0\ntopic_id: u8_VdZvYR7GRynCW2URz3g\n"):
        (tmp_path / filenames.PARTITION_METADATA).write_text(text)
        assert partition_metadata.read(tmp_path) == topic


def test_new_ids_are_never_reserved_nor_start_with_a_dash():
    ids = [topic_id.new_topic_id() for _ in range(2000)]
    assert len(set(ids)) == 2000
    assert not any(topic_id.to_string(i).startswith("-") or i in (topic_id.ZERO, topic_id.METADATA_TOPIC_ID)
                   for i in ids)
    assert all(topic_id.parse(topic_id.to_string(i)) == i for i in ids)
