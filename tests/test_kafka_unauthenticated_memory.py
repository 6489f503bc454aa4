"""Memory before login (Kafka's ``sasl.server.max.receive.size``): on a SASL listener a
frame declaring more than 512 KiB is refused on reading its size, before authentication,
so clients that never log in cannot make the broker buffer 100 MB each (the broker, a
process of its own, is measured by its peak resident memory); after authentication the
limit is ``socket.request.max.bytes`` again."""

from __future__ import annotations

import socket
import struct
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.kafka.api import ApiKey
from tests.kafka_fuzz import ServedBroker
from tests.kafka_support import free_port
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)

CONNECTIONS = 50
DECLARED = 100 * 1024 * 1024
#: what each connection sends of its declared frame before giving up
SENT = 6 * 1024 * 1024
CHUNK = b"\0" * 65536


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedBroker]:
    port = free_port()
    broker = ServedBroker(tmp_path / "data", listeners=f"SASL_PLAINTEXT://127.0.0.1:{port}")
    broker.start()
    broker.port = port
    try:
        yield broker
    finally:
        broker.stop(kill=True)


def send_declared(sock: socket.socket) -> int:
    """Declare a 100 MB frame, then send :data:`SENT` bytes of it; how many got out
    before the broker closed the connection."""
    sent = 0
    try:
        sock.sendall(struct.pack(">i", DECLARED))
        while sent < SENT:
            sock.sendall(CHUNK)
            sent += len(CHUNK)
    except OSError:  # refused: the broker closed it
        pass
    return sent


def closed_by_broker(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_50_unauthenticated_connections_declaring_100_mb_each_keep_the_broker_small(served: ServedBroker) -> None:
    _, peak_before = served.memory_kb()
    with ExitStack() as stack:
        clients = [stack.enter_context(socket.create_connection(("127.0.0.1", served.port), timeout=10))
                   for _ in range(CONNECTIONS)]
        for sock in clients:
            send_declared(sock)
        closed = [closed_by_broker(sock) for sock in clients[:5]]
        _, peak_after = served.memory_kb()
        grown_mb = (peak_after - peak_before) / 1024
        # 50 x 6 MB buffered would be 300 MB; refused on the size, the peak barely moves
        assert grown_mb < 64, f"the broker's peak resident memory grew by {grown_mb:.0f} MB"
        assert all(closed) and all(closed_by_broker(sock) for sock in clients[5:]), "closed on reading the size"
    eventually(lambda: "sasl.server.max.receive.size, before authentication" in served.log(), 10,
               "the refusal on the log")
    assert served.alive and not served.errors()


def test_a_small_request_before_authentication_is_still_served(served: ServedBroker) -> None:
    """ApiVersions (v0 header: api key, version, correlation id, client id) is answered."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 7, 1) + b"x"
        sock.sendall(struct.pack(">i", len(body)) + body)
        size, correlation = struct.unpack(">ii", sock.recv(8))
        assert correlation == 7 and size > 4
