"""The HTTP listener against hostile (or merely many) clients (exactly/app/http/server.py):
it keeps answering once the process holds more than 1,024 descriptors (waitress' select()
died there for good), while hundreds of half-sent requests are open (waitress' default
cap of 100 connections blocked it), and it closes a request whose head never ends.
At start the process' soft open-file limit is raised to its hard limit."""

from __future__ import annotations

import resource
import socket
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import pytest

from exactly.app.server import Server
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(240)

HALF_SENT = b"GET /v3/clusters HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # the head never ends


def get(server: Server, timeout: float = 30) -> int:
    with urllib.request.urlopen(f"{server.http_url}/v3/clusters", timeout=timeout) as response:
        response.read()
        return response.status


def connections(stack: ExitStack, port: int, count: int, first_bytes: bytes = b"",
                accepted: Callable[[], int] | None = None) -> list[socket.socket]:
    """``count`` connections to ``port`` on 127.0.0.1 (closed when ``stack`` closes), each
    having sent ``first_bytes``. With ``accepted`` (how many the server holds), paced by
    it: a client connects faster than a listener accepts, and a full listen queue drops
    the next handshake for a second's retransmission."""
    opened = []
    for i in range(count):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
        if first_bytes:
            sock.sendall(first_bytes)
        opened.append(sock)
        if accepted is not None and i % 50 == 49:
            eventually(lambda: accepted() >= len(opened), 60, f"the server to accept {len(opened)} connections")
    return opened


def open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def test_http_answers_with_a_1000_partition_topic_and_2000_open_kafka_connections(tmp_path: Path) -> None:
    with Server(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN) as server, ExitStack() as stack:
        server.broker.create_topic("wide", 1000)
        connections(stack, server.kafka_port, 2000, accepted=lambda: len(server.engine.clients))
        assert open_descriptors() > 3 * 1024  # far past select()'s FD_SETSIZE
        assert get(server) == 200
        # and again, after the Kafka connections closed (it used to stay dead)
        stack.close()
        assert get(server) == 200


def test_a_get_answers_within_a_second_while_500_half_sent_requests_are_open(tmp_path: Path) -> None:
    with Server(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN) as server, ExitStack() as stack:
        slow = connections(stack, server.http_port, 500, HALF_SENT)
        get(server)  # each of them has been accepted before this one (one listen queue, in order)
        took = []
        for _ in range(3):  # the best of three: a loaded machine may stall any single one
            started = time.monotonic()
            assert get(server, timeout=10) == 200
            took.append(time.monotonic() - started)
        assert min(took) < 1.0, took
        assert all(s.fileno() >= 0 for s in slow)


def test_a_request_head_that_never_ends_is_closed_and_frees_its_place(tmp_path: Path) -> None:
    """With max.connections=20, 20 half-sent requests fill the HTTP listener; each is
    closed at exactly.http.request.header.timeout.ms, and a GET that waited gets in."""
    config = {"max.connections": 20, "exactly.http.request.header.timeout.ms": 1_500}
    with Server(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN, **config) as server, ExitStack() as stack:
        trickling = connections(stack, server.http_port, 20, HALF_SENT)
        started = time.monotonic()
        for sock in trickling[:5]:  # a byte now and then does not extend the deadline
            sock.sendall(b"x")
        assert get(server) == 200
        assert time.monotonic() - started >= 1.0, "it got in only once the head deadline freed a place"
        for sock in trickling:
            assert sock.recv(1024) == b"", "closed by the server"


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit_at_start(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, hard, 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        with Server(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN):
            assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
