"""Test support for the Kafka listener: a served broker on 127.0.0.1, and a raw
protocol client that speaks single requests with kio (for what real clients never
send: exact versions, pipelining, bad frames)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from app import Broker
from app.kafka import KafkaListener, attach
from app.listeners import bind
from app.wire import decode_response, encode_request

#: internal topics of 3 partitions instead of 50, as tests/conftest.py does
CONFIG = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}


def free_port() -> int:
    """A 127.0.0.1 port free at the time of asking (for a broker in another process)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    """A broker on ``data_dir`` with its Kafka listener on a free 127.0.0.1 port."""

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.broker = Broker(data_dir, **{**CONFIG, **config})
        self.engine = self.broker.engine
        self._sock = bind("127.0.0.1", 0, "Kafka")
        self.port = self._sock.getsockname()[1]
        self.listener: KafkaListener = attach(self.engine, self._sock)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()
        self.broker.close()
        self._sock.close()

    def __enter__(self) -> "KafkaBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: a v3+ ApiVersions body: KIP-511's software name and version, as Kafka validates them
SOFTWARE = {"client_software_name": "raw-test", "client_software_version": "1.0"}


class RawClient:
    """One connection; requests built from mappings (``app/wire.py``)."""

    def __init__(self, port: int, client_id: str | None = "raw-test", timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self._next_correlation = 0

    def frame(self, api_key: int, version: int, body: Mapping[str, Any], correlation_id: int | None = None) -> bytes:
        """The bytes of one request frame."""
        if correlation_id is None:
            correlation_id = self._next_correlation
            self._next_correlation += 1
        return encode_request(api_key, version, correlation_id, self.client_id, body)

    def send(self, api_key: int, version: int, body: Mapping[str, Any], correlation_id: int | None = None) -> None:
        self.sock.sendall(self.frame(api_key, version, body, correlation_id))

    def read_frame(self) -> bytes:
        size = int.from_bytes(self._read_exactly(4), "big")
        return self._read_exactly(size)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """``(correlation id, response entity)`` of the next response."""
        return decode_response(api_key, version, self.read_frame())

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        self.send(api_key, version, body)
        return self.receive(api_key, version)[1]

    def closed_by_peer(self) -> bool:
        """True when the broker has closed the connection (reads EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read_exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                raise ConnectionError("closed by the broker")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def read_to_end(consumer_config: Mapping[str, Any], topic: str, partitions: int,
                timeout: float = 30, select: Callable[[Any], Any] = lambda message: message.value()) -> list:
    """Every value (or ``select(message)``) a fresh confluent-kafka consumer with
    ``consumer_config`` reads from the start of ``topic``'s ``partitions`` to their end
    (partition EOF), in poll order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({**consumer_config, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values, at_end = [], set()
    deadline = time.monotonic() + timeout
    while len(at_end) < partitions:
        assert time.monotonic() < deadline, f"read {len(values)} values of {topic}, no end"
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(message.partition())
            continue
        at_end.discard(message.partition())
        values.append(select(message))
    consumer.close()
    return values
