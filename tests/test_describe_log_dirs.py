"""DescribeLogDirs (API 35): the one log directory -- the data directory -- with each
partition's size, offset lag 0 and no future log, and (v4) the volume's total and
usable bytes; asked by kafka-python's ``KafkaAdminClient.describe_log_dirs`` and,
version by version, on a raw connection."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from kafka.admin import KafkaAdminClient

from exactly.app.kafka.api import ApiKey
from tests.conftest import FROZEN, data_batch
from tests.kafka_support import KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **FROZEN) as k:
        k.broker.create_topic("t", 2)
        k.broker.create_topic("other", 1)
        for i in range(3):
            k.broker.produce("t", 0, data_batch([b"v%d" % i]))
        yield k


def sizes(kafka: KafkaBroker) -> dict[tuple[str, int], int]:
    """What the partitions' segment files hold, read from the disk."""
    return {(name, p): sum(f.stat().st_size for f in (kafka.engine.disk.data_dir / f"{name}-{p}").glob("*.log"))
            for name, p in [("t", 0), ("t", 1), ("other", 0)]}


def test_kafka_python_describes_the_data_directory(kafka: KafkaBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=20_000)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(kafka.engine.disk.data_dir.absolute())
    seen = {(t["name"], p["partition_index"]): p for t in log_dir["topics"] for p in t["partitions"]}
    on_disk = sizes(kafka)
    assert {key: seen[key]["partition_size"] for key in on_disk} == on_disk
    assert on_disk["t", 0] > 0 and on_disk["t", 1] == 0
    assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in seen.values())
    stat = os.statvfs(kafka.engine.disk.data_dir)
    assert log_dir["total_bytes"] == stat.f_blocks * stat.f_frsize
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_served_version_answers_the_partitions_asked_for(kafka: KafkaBroker, version: int) -> None:
    client = raw_connection(kafka.port)
    try:
        response = client.request(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": [
            {"topic": "t", "partitions": [0, 1, 7]}, {"topic": "nope", "partitions": [0]}]})
    finally:
        client.close()
    (result,) = response.results
    assert result.error_code == 0 and result.log_dir == str(kafka.engine.disk.data_dir.absolute())
    ((topic,),) = (result.topics,)
    assert topic.name == "t", "only what exists is described, as in Kafka"
    assert [(p.partition_index, p.partition_size) for p in topic.partitions] == [
        (0, sizes(kafka)["t", 0]), (1, 0)]
    if version >= 4:
        assert result.total_bytes > 0 and result.usable_bytes > 0
