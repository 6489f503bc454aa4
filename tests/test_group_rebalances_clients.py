"""Real consumers (confluent-kafka, kafka-python) joining and leaving one group, over the
Kafka listener with the real clock: every membership change is exactly one
rebalance, counted by the members' on_assign callbacks.

The case this guards: a newcomer joins while the incumbent is busy and does not
poll, so the newcomer waits in JoinGroup longer than its own session timeout. Kafka
starts every member's session afresh when the join completes; a coordinator that
counted the wait against the newcomer expired it right after the rebalance, and
a second rebalance followed. Every wait here is on a condition with a deadline;
the incumbent's busy spell is the scenario itself, not a synchronisation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import ConsumerRebalanceListener, KafkaConsumer

from coordinator.group_metadata import GroupState
from tests.kafka_support import KafkaBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 4
#: the incumbent's session outlasts its busy spell; the newcomer's does not
INCUMBENT_SESSION_MS = 10_000
NEWCOMER_SESSION_MS = 2_000
ROUNDS = 2


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **{"group.min.session.timeout.ms": 1000}) as k:
        admin = AdminClient({"bootstrap.servers": k.bootstrap, "broker.address.family": "v4"})
        admin.create_topics([NewTopic("t", PARTITIONS, 1)])["t"].result(30)
        yield k


class Member:
    """A confluent-kafka consumer of group ``g`` that counts the rebalances it takes part
    in. librdkafka sends its first Heartbeat as soon as its SyncGroup is answered."""

    def __init__(self, kafka: KafkaBroker, name: str, session_ms: int) -> None:
        self.assigned = 0
        self.consumer = Consumer({
            "bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4", "group.id": "g",
            "client.id": name, "session.timeout.ms": session_ms, "heartbeat.interval.ms": session_ms // 5,
            "max.poll.interval.ms": 30_000, "auto.offset.reset": "earliest"})
        self.consumer.subscribe(["t"], on_assign=self._on_assign)

    def _on_assign(self, consumer: Consumer, partitions: list) -> None:
        self.assigned += 1

    def poll(self) -> None:
        self.consumer.poll(0.05)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonMember(ConsumerRebalanceListener):
    """The same with kafka-python, which -- like Kafka's Java client -- sends its first
    Heartbeat one heartbeat interval after the join: the member a coordinator that
    counted the JoinGroup wait against the session expired for certain."""

    def __init__(self, kafka: KafkaBroker, name: str, session_ms: int) -> None:
        self.assigned = 0
        self.consumer = KafkaConsumer(
            bootstrap_servers=kafka.bootstrap, group_id="g", client_id=name, session_timeout_ms=session_ms,
            heartbeat_interval_ms=session_ms // 4, max_poll_interval_ms=30_000, auto_offset_reset="earliest")
        self.consumer.subscribe(["t"], listener=self)

    def on_partitions_assigned(self, assigned: list) -> None:
        self.assigned += 1

    def on_partitions_revoked(self, revoked: list) -> None:
        pass

    def poll(self) -> None:
        self.consumer.poll(timeout_ms=50)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def poll_for(members: list[Member], seconds: float) -> None:
    """Keep ``members`` polling (heartbeats, rebalance callbacks) for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for member in members:
            member.poll()


def settle(members: list[Member]) -> list[set[int]]:
    """Poll ``members`` until their assignments split the partitions among all of them."""
    def split() -> list[set[int]] | None:
        poll_for(members, 0.05)
        assignments = [m.partitions() for m in members]
        whole = sorted(p for a in assignments for p in a) == list(range(PARTITIONS))
        return assignments if whole and all(assignments) else None
    return eventually(split, timeout=30, what="a settled assignment")


def group_state(kafka: KafkaBroker) -> tuple[GroupState, int] | None:
    async def read() -> tuple[GroupState, int] | None:
        group = kafka.engine._group_coordinator.describe("g")
        return None if group is None else (group.state, len(group.members))
    return kafka.engine.call(read, timeout=10)


@pytest.mark.parametrize("newcomer_client", [Member, KafkaPythonMember], ids=["confluent-kafka", "kafka-python"])
def test_members_joining_while_the_incumbent_is_busy_rebalance_once_each(kafka: KafkaBroker, newcomer_client) -> None:
    incumbent = Member(kafka, "incumbent", INCUMBENT_SESSION_MS)
    settle([incumbent])
    assert incumbent.assigned == 1
    for round_ in range(ROUNDS):
        newcomer = newcomer_client(kafka, f"newcomer-{round_}", NEWCOMER_SESSION_MS)

        def newcomer_waits_in_join() -> bool:
            newcomer.poll()
            return group_state(kafka) == (GroupState.PREPARING_REBALANCE, 2)
        eventually(newcomer_waits_in_join, timeout=30, what="the newcomer's JoinGroup")
        # the incumbent is busy (does not poll, so does not rejoin) for 2.5 newcomer sessions
        poll_for([newcomer], 2.5 * NEWCOMER_SESSION_MS / 1000)
        assert [len(a) for a in settle([incumbent, newcomer])] == [PARTITIONS // 2] * 2
        # two newcomer sessions later nobody has rebalanced again
        poll_for([incumbent, newcomer], 2 * NEWCOMER_SESSION_MS / 1000)
        assert [len(a) for a in (incumbent.partitions(), newcomer.partitions())] == [PARTITIONS // 2] * 2
        assert (incumbent.assigned, newcomer.assigned) == (2 * round_ + 2, 1)
        assert group_state(kafka) == (GroupState.STABLE, 2)
        newcomer.close()  # LeaveGroup: one more rebalance for the incumbent
        settle([incumbent])
        poll_for([incumbent], NEWCOMER_SESSION_MS / 1000)
        assert incumbent.assigned == 2 * round_ + 3
    incumbent.close()
