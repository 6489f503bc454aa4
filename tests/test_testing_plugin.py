"""A broker per test: the ``exactly_broker`` fixture (the package's pytest plugin) and
``exactly.app.testing.broker()`` -- a working broker for real clients, released completely
afterwards, independent of any other, and restartable in place (cleanly or as a SIGKILL
leaves it) with acknowledged data and the same ports, while a confluent-kafka
transactional producer and a read_committed consumer carry on across the restart."""

from __future__ import annotations

import os
import socket
import threading
import tomllib
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, Producer

from exactly.app.server import Server
from exactly.app.testing import broker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)
pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent


def _config(server: Server, **extra: object) -> dict:
    return {"bootstrap.servers": server.bootstrap, "broker.address.family": "v4", **extra}


def _round_trip(server: Server, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` idempotently (acks=all) and read them back from the start."""
    producer = Producer(_config(server, **{"enable.idempotence": True}))
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    return _read_all(server, topic, len(values))


def _read_all(server: Server, topic: str, n: int) -> list[bytes]:
    """The first ``n`` records of ``topic`` a fresh consumer reads."""
    consumer = Consumer(_config(server, **{"group.id": f"g-{topic}-{os.urandom(4).hex()}",
                                           "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    eventually(lambda: got.extend(m.value() for m in consumer.consume(10, 0.2) if not m.error())
               or len(got) >= n, what=f"{n} records of {topic}")
    consumer.close()
    return got


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_the_fixture_is_a_working_broker_for_confluent_kafka(exactly_broker: Server) -> None:
    exactly_broker.broker.create_topic("orders", 1)
    assert _round_trip(exactly_broker, "orders", [b"a", b"b"]) == [b"a", b"b"]
    clusters = requests.get(exactly_broker.http_url + "/v3/clusters", timeout=30).json()
    assert clusters["data"][0]["cluster_id"] == exactly_broker.cluster_id


def test_a_broker_leaves_no_thread_port_descriptor_or_file_behind(tmp_path: Path) -> None:
    with broker():  # the first one in a process loads what every later one shares
        pass
    threads, fds = {t.ident for t in threading.enumerate()}, _open_fds()
    with broker() as b:
        b.broker.create_topic("t", 1)
        b.restart(clean=False)
        ports, data_dir = (b.kafka_port, b.http_port), b.data_dir
        assert data_dir.is_dir()
        assert requests.get(b.http_url + "/v3/clusters", timeout=30).ok
    eventually(lambda: {t.ident for t in threading.enumerate()} <= threads,
               what="the broker's threads to end")
    # a descriptor another thread of this worker (a client of an earlier test) is closing
    # may linger a moment: a leak of the broker's stays
    eventually(lambda: _open_fds() <= fds, what="the broker's descriptors to close")
    assert all(_refused(port) for port in ports)
    assert not data_dir.parent.exists()  # its temporary directory


def test_two_brokers_in_one_test_are_independent(exactly_broker: Server, tmp_path: Path) -> None:
    with broker(tmp_path / "other") as other:
        exactly_broker.broker.create_topic("mine", 1)
        assert {exactly_broker.kafka_port, exactly_broker.http_port}.isdisjoint({other.kafka_port, other.http_port})
        assert exactly_broker.cluster_id != other.cluster_id
        assert "mine" not in other.engine.topics.topic_names()
        other.broker.create_topic("theirs", 1)
        assert _round_trip(other, "theirs", [b"x"]) == [b"x"]
        assert "theirs" not in exactly_broker.engine.topics.topic_names()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_restart_keeps_acknowledged_data_and_ports_and_clients_carry_on(exactly_broker: Server,
                                                                        clean: bool) -> None:
    server = exactly_broker
    server.broker.create_topic("in", 1)
    ports = (server.kafka_port, server.http_port)
    producer = Producer(_config(server, **{"transactional.id": "carry-on"}))
    producer.init_transactions(30)
    consumer = Consumer(_config(server, **{"group.id": "reader", "isolation.level": "read_committed",
                                           "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    consumer.subscribe(["in"])
    got: list[bytes] = []

    def transaction(values: list[bytes]) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce("in", value, partition=0)
        producer.commit_transaction(30)

    def read(n: int) -> None:
        eventually(lambda: got.extend(m.value() for m in consumer.consume(10, 0.2) if not m.error())
                   or len(got) >= n, what=f"{n} committed records")

    transaction([b"1", b"2"])
    read(2)
    server.restart(clean=clean)
    assert (server.kafka_port, server.http_port) == ports
    assert server.broker.fetch("in", 0, 0).high_watermark >= 3  # two records and a COMMIT marker
    transaction([b"3"])  # the same producer instance: reconnects, same coordinator state
    read(3)
    consumer.close()
    assert got == [b"1", b"2", b"3"]
    assert requests.get(server.http_url + "/v3/clusters", timeout=30).ok


def test_an_unclean_restart_recovers_what_was_written_since_the_last_flush(exactly_broker: Server) -> None:
    """Acknowledged (acks=all) records past every checkpoint survive the kill: the next
    start recovers the log from its recovery point, as after a SIGKILL."""
    exactly_broker.broker.create_topic("acked", 1)
    values = [b"%d" % i for i in range(50)]
    assert _round_trip(exactly_broker, "acked", values) == values
    exactly_broker.restart(clean=False)
    assert _read_all(exactly_broker, "acked", len(values)) == values


def test_the_docs_example_gets_the_fixture_from_the_entry_point(pytester: pytest.Pytester) -> None:
    """As a project that installed the package sees it: no conftest.py, no -p; the
    plugin comes from the ``pytest11`` entry point pyproject.toml declares. The test is
    docs/testing.md's example, as written."""
    entry_points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist = pytester.mkdir("exactly_user_site") / "exactly_plugin_check-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: exactly-plugin-check\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{name} = {module}\n" for name, module in entry_points.items()))
    pytester.syspathinsert(dist.parent)
    docs = (REPO / "docs" / "testing.md").read_text()
    section = docs[docs.index("## A broker per test"):]
    pytester.makepyfile(test_user=section.split("```python\n", 1)[1].split("```", 1)[0])  # as written
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_installed_faults_stay_installed_across_a_restart(exactly_broker: Server) -> None:
    """A test that breaks a broker on purpose and restarts it keeps breaking it."""
    fault = exactly_broker.faults.add(api="Produce", error="NOT_ENOUGH_REPLICAS")
    exactly_broker.restart(clean=False)
    assert exactly_broker.faults.list() == [fault]
    assert exactly_broker.faults is exactly_broker.broker.faults
