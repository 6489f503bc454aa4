"""SIGKILL the broker under real clients: ``run.py`` (the process ``make run`` starts) is
killed several times while a confluent-kafka idempotent producer and a transactional
producer write concurrently, and restarted on the same data directory and port each
time. Once the clients have recovered and finished:

* every record the idempotent producer saw acknowledged is there exactly once, and
  no record at all is there twice (its retries after a crash were deduplicated);
* read_committed shows every transaction the producer saw commit, whole and once;
  none it aborted; and a transaction whose outcome the crash hid entirely or not at all;
* aborted data is really in the log (so the read_committed check is not vacuous).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_support import CONFIG, read_to_end
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
KILLS = 3
TXN_RECORDS = 4
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedBroker:
    """``run.py`` on a data directory; killed with SIGKILL and started again."""

    def __init__(self, data_dir: Path, config: dict[str, object] | None = None) -> None:
        self.data_dir = data_dir
        self.config = {**CONFIG, **(config or {})}
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        configs = [arg for key, value in self.config.items() for arg in ("--config", f"{key}={value}")]
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "run.py"), "--data-dir", str(self.data_dir), "--kafka-port", str(self.port),
             "--http-port", str(free_port()), *configs],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        for line in self.process.stdout:
            if "Ctrl-C" in line:
                return
        raise AssertionError(f"the broker did not start (exit {self.process.wait()})")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def client(broker: ServedBroker, **extra: object) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "reconnect.backoff.max.ms": 500,
            **extra}


class IdempotentWriter(threading.Thread):
    def __init__(self, broker: ServedBroker, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(client(broker, **{"enable.idempotence": True, "linger.ms": 5,
                                                   "message.timeout.ms": 180_000}))
        self.stop, self.acked, self.failed = stop, set(), []

    def run(self) -> None:
        def delivered(error, message) -> None:
            if error is None:
                self.acked.add(message.value())
            else:
                self.failed.append(error)

        i = 0
        while not self.stop.is_set():
            if len(self.producer) > 500:  # keep the backlog small: progress shows up as acks
                self.producer.poll(0.05)
                continue
            self.producer.produce("idem", b"i-%06d" % i, partition=i % 2, on_delivery=delivered)
            self.producer.poll(0)
            i += 1
        self.producer.flush(180)


class TransactionalWriter(threading.Thread):
    """Transactions of TXN_RECORDS records; every third one aborted. Records what each
    transaction's outcome was as far as the client could tell."""

    def __init__(self, broker: ServedBroker, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.broker, self.stop = broker, stop
        self.outcomes: dict[int, str] = {}

    def _producer(self) -> Producer:
        while True:  # the broker may be down right now: init again until it is back
            producer = Producer(client(self.broker, **{"transactional.id": "crash-tx", "transaction.timeout.ms": 60_000}))
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException:
                continue

    def run(self) -> None:
        producer = self._producer()
        number = 0
        while not self.stop.is_set():
            outcome = "unknown"
            try:
                producer.begin_transaction()
                for j in range(TXN_RECORDS):
                    producer.produce("txn", b"t-%06d-%d" % (number, j), partition=j % 2)
                if number % 3 == 2:
                    producer.flush(30)  # so the aborted records reach the log
                    producer.abort_transaction(30)
                    outcome = "aborted"
                else:
                    producer.commit_transaction(30)
                    outcome = "committed"
            except KafkaException as e:
                error = e.args[0]
                if not error.fatal() and error.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        outcome = "aborted"
                    except KafkaException:
                        producer = self._producer()  # fences the stuck instance, ends its transaction
                else:
                    producer = self._producer()
            self.outcomes[number] = outcome
            number += 1


def read_all(broker: ServedBroker, topic: str, isolation_level: str) -> list[bytes]:
    return read_to_end(client(broker, **{"group.id": "verify", "isolation.level": isolation_level}),
                       topic, 2, timeout=60)


def test_sigkill_during_idempotent_and_transactional_writes_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    broker = ServedBroker(tmp_path / "data")
    admin = AdminClient(client(broker))
    for future in admin.create_topics([NewTopic("idem", 2, 1), NewTopic("txn", 2, 1)]).values():
        future.result(30)
    stop = threading.Event()
    idempotent, transactional = IdempotentWriter(broker, stop), TransactionalWriter(broker, stop)
    idempotent.start()
    transactional.start()

    def progress() -> tuple[int, int]:
        return len(idempotent.acked), sum(o == "committed" for o in list(transactional.outcomes.values()))

    try:
        for _ in range(KILLS):
            acked, committed = progress()
            eventually(lambda: progress()[0] >= acked + 300 and progress()[1] >= committed + 3, timeout=90,
                       what="both writers to make progress")
            broker.kill()
            broker.start()
        acked, committed = progress()
        eventually(lambda: progress()[0] >= acked + 300 and progress()[1] >= committed + 3, timeout=90,
                   what="both writers to recover after the last restart")
    finally:
        stop.set()
        idempotent.join(200)
        transactional.join(200)
    try:
        assert not idempotent.failed, idempotent.failed[:3]
        idem = Counter(read_all(broker, "idem", "read_committed"))
        assert idem and max(idem.values()) == 1  # no retry after a crash appended twice
        assert idempotent.acked <= set(idem)     # every acknowledged record survived every kill

        txn = Counter(read_all(broker, "txn", "read_committed"))
        assert max(txn.values()) == 1
        by_transaction = Counter(int(value.split(b"-")[1]) for value in txn)
        for number, outcome in transactional.outcomes.items():
            seen = by_transaction.get(number, 0)
            if outcome == "committed":
                assert seen == TXN_RECORDS, (number, seen)
            elif outcome == "aborted":
                assert seen == 0, (number, seen)
            else:
                assert seen in (0, TXN_RECORDS), (number, seen)  # atomic, whatever happened
        everything = set(read_all(broker, "txn", "read_uncommitted"))
        assert any(int(v.split(b"-")[1]) % 3 == 2 for v in everything - set(txn))  # aborted data is in the log
    finally:
        broker.stop()
