"""A full disk, and an fsync that fails, as users meet them.

A full disk is a real one: a small tmpfs mounted for the test (we run as root; the
tests skip, saying why, where mounting is not permitted), filled with a filler file
until the kernel answers ENOSPC; the broker is ``python -m exactly serve`` in its own
process on a data directory there. Freeing space is deleting the filler. Clients are
confluent-kafka, HTTP and the embedded producer.

An fsync that fails cannot be made to happen for real without a failing device, so
that test patches ``os.fsync`` (the standard library's, not ours) to raise EIO.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app import Broker
from exactly.app.http import create_app
from exactly.storage import filenames
from exactly.storage.errors import KafkaStorageError, LogDirFullError, LogOfflineError
from exactly.storage.partition_log import PartitionLog
from exactly.storage.record_batch import decode_batch
from tests.conftest import data_batch
from tests.kafka_support import read_to_end
from tests.waiting import eventually
from tests.storage_log import DurableLogs

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[1]
DISK_BYTES = 16 << 20
#: larger than a page, so a record never fits in what is left of a file's last page
VALUE_BYTES = 8 << 10
FULL_LINE = "is full ("
RESUMED_LINE = "has space again"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh 16 MiB tmpfs, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs and mounting one is not permitted here: "
                    f"{mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem answers ENOSPC; returns it."""
    filler = directory / "filler"
    with open(filler, "ab", buffering=0) as f:
        while os.statvfs(directory).f_bfree:  # again if a running broker gave a page back meanwhile
            for chunk in (1 << 20, 4096, 1):
                try:
                    while f.write(b"\0" * chunk) == chunk:
                        pass
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
    return filler


def value(name: str, i: int) -> bytes:
    return f"{name}-{i}:".encode().ljust(VALUE_BYTES, b".")


def stored_values(log: PartitionLog) -> list[bytes | None]:
    """Every record value in ``log``, read from its files."""
    return [r.value for _, batch in log.batches() for r in decode_batch(batch).records]


def lock_is_free(data: Path) -> bool:
    """Whether another process could take the data directory's lock now."""
    fd = os.open(data / filenames.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


# -- the log itself -------------------------------------------------------------------------------


def test_an_append_that_finds_no_space_leaves_no_byte_behind(small_disk: Path) -> None:
    data = small_disk / "data"
    with DurableLogs(data) as logs:
        logs.create_topic("orders")
        assert logs.produce("orders", 0, data_batch([value("acked", 0)], 7, 0, 0)) == 0
        log = logs.log("orders")
        size, end = log.size_bytes, log.log_end_offset
        filler = fill(small_disk)
        with pytest.raises(LogDirFullError):  # a short write: part of it fitted in the last page
            log.append_data(data_batch([value("refused", i) for i in range(4)], 7, 0, 1))
        assert (log.size_bytes, log.log_end_offset, os.path.getsize(log.active_segment.log_path)) == (size, end, size)
        filler.unlink()
        assert logs.produce("orders", 0, data_batch([value("later", 0)], 7, 0, 1)) == 1, "same sequence, next offset"
    with DurableLogs(data) as logs:
        assert logs.log("orders").truncated_bytes == 0
        assert stored_values(logs.log("orders")) == [value("acked", 0), value("later", 0)]


# -- a served broker -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``python -m exactly serve`` on ``data``; its stdout and log (stderr) in files
    outside the small disk."""

    def __init__(self, data: Path, logs: Path) -> None:
        self.data, self.kafka_port, self.http_port = data, free_port(), free_port()
        self.out, self.err = logs / "serve.out", logs / "serve.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exactly", "serve", "--data-dir", str(data), "--kafka-port", str(self.kafka_port),
             "--http-port", str(self.http_port), "--config", "transaction.state.log.num.partitions=1",
             "--config", "offsets.topic.num.partitions=1"],
            cwd=REPO, stdout=self.out.open("w"), stderr=self.err.open("w"))
        eventually(lambda: "recovered" in self.out.read_text() or self.proc.poll() is not None, 60, "start-up")
        assert self.proc.poll() is None, self.err.read_text()
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"
        self.cluster_id = self.http("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]

    def log_lines(self, needle: str) -> list[str]:
        return [line for line in self.err.read_text().splitlines() if needle in line]

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        text = raw.decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def produce_http(self, topic: str, data: bytes) -> tuple[int, Any]:
        return self.http("POST", f"/v3/clusters/{self.cluster_id}/topics/{topic}/records",
                         {"partition_id": 0, "value": {"type": "STRING", "data": data.decode()}})

    def stop(self) -> int:
        """SIGTERM, and the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture
def served(small_disk: Path, tmp_path: Path) -> Iterator[Served]:
    server = Served(small_disk / "data", tmp_path)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=30)


def create_topic(bootstrap: str, name: str) -> Any:
    """CreateTopics through confluent-kafka's admin client; the future's exception or None."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: its handle serves the future
    return admin.create_topics([NewTopic(name, 1, 1)])[name].exception(timeout=30)


def deliver(producer: Any, values: list[bytes], topic: str = "orders") -> list[Any]:
    """Produce ``values`` and flush; each delivery report's error (None: delivered)."""
    reports: dict[bytes, Any] = {}
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, msg: reports.__setitem__(msg.value(), err))
    assert producer.flush(60) == 0, "every delivery is reported"
    return [reports[v] for v in values]


def test_a_full_disk_is_kafka_storage_error_everywhere_and_writes_resume_when_space_returns(
        served: Served, small_disk: Path) -> None:
    from confluent_kafka import KafkaError, Producer

    assert create_topic(served.bootstrap, "orders") is None
    producer = Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 3000})
    before = [value("before", i) for i in range(5)]
    assert deliver(producer, before) == [None] * 5

    filler = fill(small_disk)
    # retriable: the idempotent producer retries until message.timeout.ms, then reports a timeout ...
    refused = deliver(producer, [value("refused", i) for i in range(3)])
    assert [err.code() for err in refused] == [KafkaError._MSG_TIMED_OUT] * 3, refused
    # ... and one whose retries run out first reports the broker's answer
    plain = Producer({"bootstrap.servers": served.bootstrap, "linger.ms": 0, "retries": 2, "retry.backoff.ms": 50,
                      "message.timeout.ms": 30000})
    refused = deliver(plain, [value("refused-plain", 0)])
    assert refused[0].code() == KafkaError.KAFKA_STORAGE_ERROR, refused

    status, body = served.produce_http("orders", value("http-refused", 0))
    assert status == 507, body
    assert (body["error_name"], body["kafka_error_code"]) == ("KAFKA_STORAGE_ERROR", 56)

    created = create_topic(served.bootstrap, "more")
    assert created is not None and created.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, created

    console = served.http("GET", "/")[1]
    assert "Disk full" in console and "KAFKA_STORAGE_ERROR (56)" in console

    filler.unlink()
    after = [value("after", i) for i in range(3)]
    assert deliver(producer, after) == [None] * 3, "writes resume without a restart"
    status, body = served.produce_http("orders", value("http-after", 0))
    assert status == 200, body
    eventually(lambda: served.log_lines(RESUMED_LINE), 10, "the line saying writes resume")
    assert "Disk full" not in served.http("GET", "/")[1]
    producer.flush(10)

    assert len(served.log_lines(FULL_LINE)) == 1, served.err.read_text()
    assert len(served.log_lines(RESUMED_LINE)) == 1, served.err.read_text()
    assert "Traceback" not in served.err.read_text()
    assert not served.log_lines("closing"), "no connection was closed for a full disk"

    stored = read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "audit"}, "orders", 1)
    assert stored == before + after + [value("http-after", 0)], "each acknowledged record once, no refused one"
    assert served.stop() == 0
    assert "stopped cleanly" in served.out.read_text()
    with Broker(served.data) as broker:  # the lock is released, the data as acknowledged
        assert broker.engine.partitions.log("orders", 0).high_watermark == len(stored)


def test_sigterm_on_a_full_disk_releases_the_directory_and_loses_nothing_acknowledged(
        served: Served, small_disk: Path) -> None:
    from confluent_kafka import Producer

    assert create_topic(served.bootstrap, "orders") is None
    producer = Producer({"bootstrap.servers": served.bootstrap, "linger.ms": 0, "message.timeout.ms": 2000})
    acknowledged = [value("acked", i) for i in range(20)]
    assert deliver(producer, acknowledged) == [None] * 20
    filler = fill(small_disk)
    assert deliver(producer, [value("refused", 0)])[0] is not None

    assert served.stop() == 0, served.err.read_text()
    assert "Traceback" not in served.err.read_text()
    # whether the final flush found room for its snapshots depends on the bytes the fill left
    # over; either way the broker says which it was, and nothing acknowledged depends on it
    assert "stopped cleanly" in served.out.read_text() or "stopped, uncleanly" in served.out.read_text()
    assert lock_is_free(served.data), "a new broker can take the directory at once"

    filler.unlink()
    with Broker(served.data) as broker:
        assert stored_values(broker.engine.partitions.log("orders", 0)) == acknowledged


def test_starting_on_a_full_disk_is_one_clear_error_and_starts_once_space_is_freed(
        small_disk: Path, tmp_path: Path) -> None:
    data = small_disk / "data"
    with Broker(data) as broker:
        broker.create_topic("orders", partitions=1)
        broker.produce("orders", 0, data_batch([value("acked", 0)]))
    filler = fill(small_disk)
    started = subprocess.run([sys.executable, "-m", "exactly", "serve", "--data-dir", str(data), "--kafka-port",
                              str(free_port()), "--http-port", str(free_port())],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert started.returncode == 1
    assert "KAFKA_STORAGE_ERROR" in started.stderr and "No space left on device" in started.stderr, started.stderr
    assert "Traceback" not in started.stderr, started.stderr
    filler.unlink()
    with Broker(data) as broker:
        assert stored_values(broker.engine.partitions.log("orders", 0)) == [value("acked", 0)]


def test_the_embedded_producer_raises_kafka_storage_error_and_close_releases_the_lock(small_disk: Path) -> None:
    data = small_disk / "data"
    broker = Broker(data, **{"exactly.jobs.enable": False})
    broker.create_topic("orders", partitions=1)
    producer = broker.producer(delivery_timeout_ms=1500, linger_ms=0)
    acknowledged = [value("acked", i) for i in range(5)]
    for v in acknowledged:
        producer.send("orders", v, partition=0).get(timeout=30)
    filler = fill(small_disk)

    with pytest.raises(KafkaStorageError) as raised:
        producer.send("orders", value("refused", 0), partition=0).get(timeout=30)
    assert raised.value.code == 56 and raised.value.name == "KAFKA_STORAGE_ERROR"
    with pytest.raises(LogDirFullError):
        broker.produce("orders", 0, data_batch([value("raw", 0)]))
    assert broker.engine.disk.full is not None

    producer.close()
    broker.close()  # the final snapshot and checkpoints find no space: the lock is released all the same
    assert lock_is_free(data)

    filler.unlink()
    with Broker(data, **{"exactly.jobs.enable": False}) as again:
        assert stored_values(again.engine.partitions.log("orders", 0)) == acknowledged
        assert again.produce("orders", 0, data_batch([b"after"])) == len(acknowledged)


# -- an fsync that fails ---------------------------------------------------------------------------


def test_a_failed_fsync_acknowledges_nothing_and_takes_the_partition_offline_until_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    broker = Broker(data, **{"exactly.jobs.enable": False})
    broker.create_topic("orders", partitions=1)
    broker.create_topic("other", partitions=1)
    assert broker.produce("orders", 0, data_batch([b"acked"])) == 0

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", eio)
        with pytest.raises(LogOfflineError):
            broker.produce("orders", 0, data_batch([b"not durable"]))
    orders = broker.engine.partitions.log("orders", 0)
    assert orders.high_watermark == 1, "what the failed fsync covered is invisible to readers"

    # fsync works again, but what the kernel dropped after the failure is unknown: no write until a restart
    with pytest.raises(LogOfflineError):
        broker.produce("orders", 0, data_batch([b"later"]))
    assert broker.produce("other", 0, data_batch([b"fine"])) == 0, "other partitions are not affected"

    client = create_app(broker.engine).test_client()
    answer = client.post(f"/v3/clusters/{broker.cluster_id}/topics/orders/records",
                         json={"partition_id": 0, "value": {"type": "STRING", "data": "v"}})
    assert answer.status_code == 507
    assert (answer.json["error_name"], answer.json["kafka_error_code"]) == ("KAFKA_STORAGE_ERROR", 56)
    assert "1 partition offline" in client.get("/").get_data(as_text=True)
    assert len([r for r in caplog.records if "fsync of orders-0 failed" in r.getMessage()]) == 1

    broker.close()
    assert lock_is_free(data)
    assert not (data / filenames.CLEAN_SHUTDOWN_FILE).exists(), "the offline log is recovered on the next start"
    with Broker(data, **{"exactly.jobs.enable": False}) as again:
        assert again.engine.partitions.log("orders", 0).offline is None
        offset = again.produce("orders", 0, data_batch([b"after restart"]))
        stored = stored_values(again.engine.partitions.log("orders", 0))
    # the write whose fsync failed was never acknowledged: after the restart it may or may not be there
    assert stored[0] == b"acked" and stored[-1] == b"after restart" and offset == len(stored) - 1


def test_transactions_and_offset_commits_get_retriable_errors_and_complete_once_space_returns(
        served: Served, small_disk: Path) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    assert create_topic(served.bootstrap, "orders") is None
    # ids longer than a page: every record of the coordinators' logs needs a new page, which a full
    # disk has not (a small one could still land in what is left of a file's last page)
    producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "billing-" + "x" * VALUE_BYTES,
                         "linger.ms": 0})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "billing-in-" + "g" * VALUE_BYTES,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("orders", 0, 0)], asynchronous=False)
    producer.begin_transaction()
    producer.produce("orders", b"in the transaction", partition=0)
    producer.flush(30)

    filler = fill(small_disk)
    with pytest.raises(KafkaException) as raised:  # EndTxn: the coordinator cannot write PrepareCommit
        producer.commit_transaction(5)
    assert raised.value.args[0].retriable(), raised.value
    with pytest.raises(KafkaException) as raised:  # OffsetCommit: NOT_COORDINATOR, as Kafka answers it
        consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
    assert raised.value.args[0].code() == KafkaError.NOT_COORDINATOR, raised.value

    filler.unlink()
    producer.commit_transaction(30)  # the retry commits once space returns
    committed = eventually(lambda: _committed(consumer), 30, "the offset commit")
    assert committed == 1
    consumer.close()
    stored = read_to_end({"bootstrap.servers": served.bootstrap, "group.id": "audit",
                          "isolation.level": "read_committed"}, "orders", 1)
    assert stored == [b"in the transaction"]
    assert "Traceback" not in served.err.read_text()
    assert not served.log_lines("closing"), "no connection was closed for a full disk"
    assert len(served.log_lines(FULL_LINE)) == 1, served.err.read_text()


def _committed(consumer: Any) -> int | None:
    """Commit offset 1 of orders-0 for the consumer's group; the committed offset, or None."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
    except KafkaException:
        return None
    return consumer.committed([TopicPartition("orders", 0)], timeout=10)[0].offset
