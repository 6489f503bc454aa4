"""A big group's JoinGroup round does not stall everyone else (the issue's shape: 2,000
members with 20 KB of metadata each, so the leader's answer is a 40 MB response).

The group coordinator answers a completed round's JoinGroups a few per turn of the
loop (each answer wakes a request that then builds and encodes its response), the
leader's answer is encoded on a thread, and responses are written a slice at a time.
Before, the 2,000 answers were built in one turn, and the leader's 40 MB on the loop:
another client's produce waited behind all of it."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.server import Server
from exactly.coordinator.group_coordinator import JOIN_ANSWERS_PER_ROUND
from exactly.storage.clock import FakeClock
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)

MEMBERS = 1000
METADATA = b"m" * 40_000  # the leader answer of the 2,000 x 20 KB: 40 MB
GROUP = "big"


def string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def join_group_v0(correlation_id: int) -> bytes:
    """JoinGroup v0 (header v1): group, session timeout, no member id, one protocol."""
    body = (string(GROUP) + struct.pack(">i", 30_000) + string("") + string("consumer")
            + struct.pack(">i", 1) + string("range") + struct.pack(">i", len(METADATA)) + METADATA)
    payload = struct.pack(">hhi", 11, 0, correlation_id) + string("big-group-test") + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(min(n - len(data), 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return bytes(data)
    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_a_completed_round_answers_its_members_a_few_per_turn_of_the_loop(tmp_path: Path) -> None:
    """40 new members wait out the initial delay in one round; when it completes, at most
    JOIN_ANSWERS_PER_ROUND of them are answered per turn of the loop, and every one is."""
    clock = FakeClock()
    with Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS, **FROZEN,
                **{"group.initial.rebalance.delay.ms": 1000}) as broker:
        engine = broker.engine
        coordinator = engine.groups.coordinator

        async def start() -> list[asyncio.Task]:
            tasks = [asyncio.ensure_future(coordinator.join_group(
                GROUP, "", "consumer", [("range", b"meta")], 30_000, 30_000, None, f"c{i}", "", False, False))
                for i in range(40)]
            for _ in range(3):
                await asyncio.sleep(0)
            return tasks
        tasks = engine.call(start)
        eventually(lambda: len(engine.call(lambda: coordinator.describe(GROUP).members)) == 40, 30, "40 members")

        async def complete() -> list[int]:
            coordinator.tick()  # the round completes if its delay has passed
            done = []
            while len(done) < 30 and (not done or done[-1] < len(tasks)):
                await asyncio.sleep(0)
                done.append(sum(t.done() for t in tasks))
            return done
        for _ in range(40):  # the initial delay, extended by each newcomer up to the rebalance timeout
            clock.advance(1000)
            done_per_turn = engine.call(complete)
            if done_per_turn[-1]:
                break
        assert done_per_turn[-1] == 40, done_per_turn
        assert max(b - a for a, b in zip([0, *done_per_turn], done_per_turn)) <= JOIN_ANSWERS_PER_ROUND, \
            done_per_turn
        results = engine.call(lambda: [t.result() for t in tasks])
        assert sum(1 for r in results if len(r.members) == 40) == 1, "one leader, with every member"


def test_another_client_s_produce_is_not_held_for_seconds_by_a_round_with_a_40_mb_leader_answer(tmp_path: Path) -> None:
    config = {"group.initial.rebalance.delay.ms": 1500}
    with Server(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN, **config) as server, ExitStack() as stack:
        server.broker.create_topic("other", 1)
        members = []
        for i in range(MEMBERS):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.kafka_port), timeout=60))
            sock.sendall(join_group_v0(i))
            members.append(sock)
            if i % 50 == 49:  # a full listen queue would cost a second per handshake
                eventually(lambda: len(server.engine.clients) >= len(members), 60, "the broker to accept")
        answered = threading.Event()
        produced: list[float] = []

        def produce_meanwhile() -> None:
            while not answered.is_set():
                started = time.monotonic()
                server.broker.produce("other", 0, encode_batch([SimpleRecord(b"meanwhile")]))
                produced.append(time.monotonic() - started)
                time.sleep(0.01)
        producer = threading.Thread(target=produce_meanwhile, daemon=True)
        producer.start()
        try:
            answers = [read_frame(sock) for sock in members]
        finally:
            answered.set()
            producer.join(30)
        assert sum(1 for a in answers if len(a) > len(METADATA) * MEMBERS) == 1, "one leader, with every member"
        assert produced and max(produced) < 2.0, f"another client's produce took {max(produced):.2f} s"
