"""Exactly-once with KIP-848 groups through crashes: two members of a transactional
consume-transform-produce application (confluent-kafka, ``group.protocol=consumer``,
tests/kip848_eos_child.py) on a served Exactly (``run.py``) that is SIGKILLed and
restarted three times, while members are SIGKILLed, restarted and replaced. Each kill
lands while transactions, heartbeats and reconciliations are under way, so the group's
records (members, epochs, target assignment) and the pending transactional offsets
are recovered from ``__consumer_offsets`` as a crash left them. Then every input
record is in the output exactly once, in order, and the group's committed offsets are
at the input's end (tests/kip848_eos.py checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kip848_eos import Member, check_exactly_once, committed, prepare
from tests.kip848_eos_child import PARTITIONS
from tests.test_kafka_crash import ServedBroker
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
PER_PARTITION = 150
#: members fenced within seconds of a SIGKILL; heartbeats often, so reconciliation is quick
GROUP_CONFIG = {"group.consumer.session.timeout.ms": 6000, "group.consumer.heartbeat.interval.ms": 500}


def test_transactional_application_with_consumer_groups_survives_broker_and_member_kills(tmp_path: Path) -> None:
    broker = ServedBroker(tmp_path / "data", GROUP_CONFIG)
    members: list[Member] = []
    try:
        prepare(broker.bootstrap, PER_PARTITION)
        members = [Member(broker.bootstrap, 0, tmp_path), Member(broker.bootstrap, 1, tmp_path)]
        total = PARTITIONS * PER_PARTITION
        # what happens at each tenth of the input: the broker or a member dies, or a member is replaced
        for step, action in enumerate(["broker", "member", "broker", "restart", "member", "broker"], start=1):
            eventually(lambda: committed(broker.bootstrap) >= total * step // 8, timeout=120,
                       what=f"the application to commit {step}/8 of the input before the {action} event")
            if action == "broker":
                broker.kill()
                broker.start()
            else:
                old = members.pop(0)
                old.kill() if action == "member" else old.stop()
                members.append(Member(broker.bootstrap, old.slot, tmp_path))
        eventually(lambda: committed(broker.bootstrap) == total, timeout=180,
                   what="the application to commit the whole input")
        for member in members:
            member.stop()
        check_exactly_once(broker.bootstrap, PER_PARTITION)
    except BaseException as failure:
        for member in members:
            if member.process.poll() is None:
                member.process.kill()
                member.process.wait(30)
            failure.add_note(f"member {member.slot}: {member.errors()}")
        raise
    finally:
        broker.stop()
