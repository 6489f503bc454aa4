"""Kafka's limits, with Kafka's names and errors: no request can take the broker down.

* Partitions per request: a CreateTopics request creating more than 10,000
  partitions in all, or a CreatePartitions adding more, is POLICY_VIOLATION (44)
  with Kafka's message -- ``validate_only`` included, on the Kafka wire, over HTTP
  and in the embedded API.
* ``exactly.max.partitions``: the partitions one broker holds at most.
* A topic creation is all or nothing: a real ENOSPC (an inode-limited tmpfs) or
  EMFILE (a low RLIMIT_NOFILE) part-way leaves no directory, ``topics.json`` as it
  was, and a broker that answers, closes and starts again.
* ``max.connections`` / ``max.connections.per.ip`` (and its overrides): one more
  connection is closed as it is accepted, logged.
* Every refusal is counted in ``/metrics`` as ``exactly_limit_refusals_total{limit}``.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from exactly.app import Broker
from exactly.app.config import BrokerConfig
from exactly.app.http import create_app
from exactly.app.kafka.api import ApiKey
from exactly.app.spark.kafka_client import KafkaConnection
from exactly.storage.errors import InvalidConfigError, InvalidGroupIdError, InvalidRequestError, PolicyViolationError
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.kafka_support import SOFTWARE, KafkaBroker, raw_connection
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def admin(kafka: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def create(kafka: KafkaBroker, *topics: NewTopic, validate_only: bool = False) -> dict[str, KafkaError | None]:
    """Each topic's outcome of one CreateTopics request: None (created) or its error."""
    client = admin(kafka)  # referenced until the answers are in: its handle ends with it
    futures = client.create_topics(list(topics), validate_only=validate_only, request_timeout=30)
    outcomes: dict[str, KafkaError | None] = {}
    for name, future in futures.items():
        error = future.exception(timeout=60)  # not raised: a traceback would keep the client alive
        outcomes[name] = error.args[0] if isinstance(error, KafkaException) else error
    return outcomes


def partition_dirs(data_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.rsplit("-", 1)[0] == topic)


def refusals(engine_owner: Broker | KafkaBroker) -> dict[str, float]:
    """``exactly_limit_refusals_total`` by limit, scraped from ``/metrics``."""
    client = create_app(engine_owner.engine, test_config={"TESTING": True}).test_client()
    text = client.get("/metrics").get_data(True)
    return {s.labels["limit"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "exactly_limit_refusals_total"}


# -- partitions per request ----------------------------------------------------------------


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_with_2_pow_31_minus_1_partitions_is_policy_violation(kafka: KafkaBroker,
                                                                           validate_only: bool) -> None:
    """kafka-python sends any int32 (librdkafka refuses more than 100,000 itself: that is
    sent too); the broker refuses, creates nothing and goes on serving."""
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=30_000)
    try:
        answer = client.create_topics({"huge": {"num_partitions": 2**31 - 1, "replication_factor": 1}},
                                      validate_only=validate_only, raise_errors=False)
    finally:
        client.close()
    (topic,) = answer["topics"]
    assert (topic["name"], topic["error_code"]) == ("huge", KafkaError.POLICY_VIOLATION)
    assert topic["error_message"].startswith("Excessively large number of partitions per request")
    outcome = create(kafka, NewTopic("large", 100_000, 1), validate_only=validate_only)["large"]
    assert outcome is not None and outcome.code() == KafkaError.POLICY_VIOLATION
    assert partition_dirs(kafka.broker.engine.disk.data_dir, "huge") == []
    assert create(kafka, NewTopic("small", 2, 1))["small"] is None  # the broker goes on serving
    assert refusals(kafka)["max.partitions.per.request"] == 2


def test_10001_partitions_in_one_request_fail_every_topic_of_it(kafka: KafkaBroker) -> None:
    """Kafka counts the whole request: 5,000 + 5,001 is over, though each alone is not."""
    outcomes = create(kafka, NewTopic("a", 10_001, 1))
    assert outcomes["a"].code() == KafkaError.POLICY_VIOLATION
    outcomes = create(kafka, NewTopic("b", 5_000, 1), NewTopic("c", 5_001, 1), NewTopic("d", 1, 1))
    assert {name: e.code() for name, e in outcomes.items()} == dict.fromkeys("bcd", KafkaError.POLICY_VIOLATION)
    assert set(kafka.broker.engine.topics.topic_names()).isdisjoint("abcd")


def test_10000_partitions_in_one_request_are_allowed(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **{"exactly.max.partitions": 20_000}) as kafka:
        assert create(kafka, NewTopic("big", 10_000, 1), validate_only=True) == {"big": None}


def test_the_embedded_api_refuses_too_many_partitions(broker: Broker) -> None:
    for validate_only in (True, False):
        with pytest.raises(PolicyViolationError, match="Excessively large number of partitions"):
            broker.create_topic("huge", 2**31 - 1, validate_only=validate_only)
    assert broker.create_topic("fine", 2, validate_only=True) is None
    assert "huge" not in broker.engine.topics.topic_names() and "fine" not in broker.engine.topics.topic_names()


def test_the_http_api_answers_policy_violation_for_too_many_partitions(broker: Broker) -> None:
    client = create_app(broker.engine, test_config={"TESTING": True}).test_client()
    topics = f"/v3/clusters/{broker.cluster_id}/topics"
    for body in ({"topic_name": "huge", "partitions_count": 10_001},
                 {"topic_name": "huge", "partitions_count": 2**31 - 1, "validate_only": True}):
        response = client.post(topics, json=body)
        assert response.status_code == 400
        assert (response.json["error_name"], response.json["kafka_error_code"]) == ("POLICY_VIOLATION", 44)
    assert client.post(topics, json={"topic_name": "t", "partitions_count": 1}).status_code == 201
    grown = client.patch(f"{topics}/t", json={"partitions_count": 10_002})  # adds 10,001
    assert grown.status_code == 400 and grown.json["error_name"] == "POLICY_VIOLATION"
    assert broker.engine.topics.topic("t").partitions == 1
    assert refusals(broker)["max.partitions.per.request"] == 3


# -- exactly.max.partitions ----------------------------------------------------------------


def test_exactly_max_partitions_bounds_what_the_broker_holds(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **{"exactly.max.partitions": 5}) as kafka:
        assert create(kafka, NewTopic("a", 3, 1)) == {"a": None}
        refused = create(kafka, NewTopic("b", 3, 1))["b"]
        assert refused.code() == KafkaError.POLICY_VIOLATION and "exactly.max.partitions=5" in refused.str()
        assert create(kafka, NewTopic("b", 3, 1), validate_only=True)["b"].code() == KafkaError.POLICY_VIOLATION
        with pytest.raises(PolicyViolationError, match="exactly.max.partitions"):
            kafka.broker.create_topic("c", 3)
        client = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
        grown = client.patch(f"/v3/clusters/{kafka.broker.cluster_id}/topics/a", json={"partitions_count": 6})
        assert grown.status_code == 400 and grown.json["kafka_error_code"] == 44
        assert create(kafka, NewTopic("b", 2, 1)) == {"b": None}  # exactly up to the limit
        assert refusals(kafka)["exactly.max.partitions"] == 4
        # the broker's own topics are not held to it: a transactional producer still works
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "tx"})
        producer.init_transactions(30)
        del producer  # its handle ends now, before the broker does
        assert len(dict(kafka.engine.partitions.logs())) == 5 + SMALL_INTERNAL_TOPICS["transaction.state.log.num.partitions"]
        kafka.broker.delete_topic("b")
        assert create(kafka, NewTopic("b", 2, 1)) == {"b": None}  # nor do they count against it


# -- all or nothing ---------------------------------------------------------------------------

#: inodes of the small file system: the broker's own files and a few dozen partitions
INODES = 300


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of :data:`INODES` inodes (mounting needs root: skipped where it is not permitted)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=64m,nr_inodes={INODES}", "tmpfs",
                              str(mount_point)], capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)


def test_running_out_of_inodes_part_way_creates_nothing_and_the_broker_restarts(small_fs: Path) -> None:
    data = small_fs / "data"
    with KafkaBroker(data) as kafka:
        assert create(kafka, NewTopic("small", 1, 1)) == {"small": None}
        registry = (data / "topics.json").read_bytes()
        failed = create(kafka, NewTopic("big", 1_000, 1))["big"]  # the file system holds a few dozen
        assert failed is not None and failed.code() == KafkaError.KAFKA_STORAGE_ERROR, failed
        assert "No space left on device" in failed.str()
        client = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
        grown = client.patch(f"/v3/clusters/{kafka.broker.cluster_id}/topics/small", json={"partitions_count": 900})
        assert grown.status_code == 503 and grown.json["error_name"] == "KAFKA_STORAGE_ERROR"
        assert partition_dirs(data, "big") == [] and partition_dirs(data, "small") == ["small-0"]
        assert (data / "topics.json").read_bytes() == registry
        assert create(kafka, NewTopic("after", 2, 1)) == {"after": None}  # the inodes came back
    with Broker(data) as again:  # closed cleanly, starts again
        assert sorted(again.engine.topics.topic_names()) == ["after", "small"]
        assert again.engine.partitions.clean_start


EMFILE_CHILD = """
import json, os, resource, sys
from pathlib import Path
from exactly import Broker
from exactly.storage.errors import KafkaStorageError
data = Path(sys.argv[1])
with Broker(data, **json.loads(sys.argv[2])) as broker:
    broker.create_topic("small", 1)
    registry = (data / "topics.json").read_bytes()
    open_fds = len(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds + 60, hard))  # about 20 partitions' worth
    try:
        broker.create_topic("big", 500)
        outcome = "created"
    except KafkaStorageError as e:
        outcome = f"{e.name}: {e}"
    fds_after = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    print(json.dumps({"outcome": outcome, "leaked_fds": fds_after - open_fds,
                      "registry_unchanged": (data / "topics.json").read_bytes() == registry,
                      "dirs": sorted(p.name for p in data.iterdir() if p.name.startswith("big-"))}))
"""


def test_running_out_of_file_descriptors_part_way_creates_nothing(tmp_path: Path) -> None:
    """A real EMFILE, in a child process whose RLIMIT_NOFILE is just above what it has open."""
    data = tmp_path / "data"
    child = subprocess.run([sys.executable, "-c", EMFILE_CHILD, str(data),
                            json.dumps({**SMALL_INTERNAL_TOPICS, **FROZEN})],
                           cwd=REPO, capture_output=True, text=True, timeout=90)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["outcome"].startswith("KAFKA_STORAGE_ERROR: ") and "Too many open files" in report["outcome"]
    assert report == {**report, "leaked_fds": 0, "registry_unchanged": True, "dirs": []}
    with Broker(data) as again:
        assert sorted(again.engine.topics.topic_names()) == ["small"] and again.engine.partitions.clean_start


# -- connections -----------------------------------------------------------------------------


def connect(kafka: KafkaBroker) -> KafkaConnection:
    return raw_connection(kafka.port, timeout=10)


def served(client: KafkaConnection) -> bool:
    """True when the connection answers ApiVersions; False when the broker closed it."""
    try:
        return client.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0
    except (ConnectionError, OSError):
        return False


@pytest.mark.parametrize("config, limit", [({"max.connections.per.ip": 2}, "max.connections.per.ip"),
                                           ({"max.connections": 2}, "max.connections")])
def test_a_connection_over_the_limit_is_closed_at_accept(tmp_path: Path, caplog, config: dict,
                                                         limit: str) -> None:
    caplog.set_level(logging.INFO, "exactly.app.kafka.server")
    with KafkaBroker(tmp_path / "data", **config) as kafka:
        first, second = connect(kafka), connect(kafka)
        assert served(first) and served(second)
        third = connect(kafka)
        assert third.closed_by_peer()
        assert "rejected connection from 127.0.0.1" in caplog.text and limit in caplog.text
        assert refusals(kafka)[limit] == 1
        first.close()
        eventually(lambda: len(kafka.engine.clients) == 1, 10, "the closed connection to end")
        fourth = connect(kafka)
        assert served(fourth) and served(second)  # a freed place is taken again
        for client in (second, third, fourth):
            client.close()


def test_max_connections_per_ip_overrides(tmp_path: Path) -> None:
    config = {"max.connections.per.ip": 1, "max.connections.per.ip.overrides": "127.0.0.1:3, 10.0.0.1:0"}
    with KafkaBroker(tmp_path / "data", **config) as kafka:
        clients = [connect(kafka) for _ in range(3)]
        assert all(served(c) for c in clients)
        extra = connect(kafka)
        assert extra.closed_by_peer()
        for client in (*clients, extra):
            client.close()


def test_a_real_client_works_within_the_limits(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **{"max.connections.per.ip": 4}) as kafka:
        assert create(kafka, NewTopic("t", 1, 1)) == {"t": None}
        assert refusals(kafka) == dict.fromkeys(refusals(kafka), 0.0)


@pytest.mark.parametrize("values, message", [
    ({"max.connections": -1}, "max.connections must be >= 0"),
    ({"max.connections.per.ip": -1}, "max.connections.per.ip must be >= 0"),
    ({"exactly.max.partitions": -1}, "exactly.max.partitions must be >= 0"),
    ({"max.connections.per.ip.overrides": "localhost"}, "must look like 127.0.0.1:100"),
    ({"max.connections.per.ip.overrides": "127.0.0.1:-2"}, "must look like 127.0.0.1:100"),
])
def test_bad_limits_are_invalid_config(values: dict, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_kafka(values)


def test_the_defaults_are_kafkas_but_max_connections_is_sized_for_one_machine() -> None:
    config = BrokerConfig()
    assert config.max_connections_per_ip == 2**31 - 1  # Kafka's Int.MAX: none
    assert config.max_connections == 10_000  # Kafka's is none: here, with as many HTTP ones, a descriptor budget
    assert config.sasl_server_max_receive_size == 524_288  # Kafka's
    assert config.connection_overrides() == {}


# -- ids the internal topics cannot key ------------------------------------------------------


def test_a_transactional_or_group_id_too_long_to_be_a_key_is_refused_not_a_crash(broker: Broker) -> None:
    """Over HTTP an id can be longer than the int16 string of the internal topics' keys
    (the Kafka wire cannot send one): refused with Kafka's error, the broker unharmed."""
    engine, long_id = broker.engine, "t" * 32_768
    with pytest.raises(InvalidRequestError, match="longer than 32767 bytes"):
        engine.call(engine.transactions.init_producer_id, long_id, 60_000)
    pid, epoch = engine.call(engine.transactions.init_producer_id, "tx", 60_000)
    engine.call(engine.transactions.add_offsets_to_txn, "tx", pid, epoch, "g")
    with pytest.raises(InvalidGroupIdError):
        engine.call(engine.transactions.txn_offset_commit, "tx", long_id, pid, epoch, {})
    with pytest.raises(InvalidGroupIdError):
        engine.call(engine.groups.commit_offsets, long_id, {})
    assert engine.call(engine.transactions.init_producer_id, "t" * 32_767, 60_000)[1] == 0  # the longest key still fits
