"""The online migration of a running group between the classic and the consumer protocol
(KIP-848), with real clients, on Kafka 4.4 and on Exactly alike.

Two members of the transactional consume-transform-produce application
(tests/kip848_eos_child.py, confluent-kafka) start with ``group.protocol=classic``; they
are replaced one at a time by ``group.protocol=consumer`` members, then back by classic
ones; after each step more input is written and copied by the group as it is then. At each step the group's type and state (ListGroups v5)
are what Kafka's are -- classic, upgraded to consumer by the first consumer-protocol
member (the remaining classic member inside it), consumer, consumer with a classic
member again, and classic once the last consumer-protocol member leaves -- and so are
its members' types (ConsumerGroupDescribe v1's KIP-1099 member type; a classic group
is GROUP_ID_NOT_FOUND there) and what DescribeGroups says (a consumer group, its classic
members included, is Dead to it, GROUP_ID_NOT_FOUND from v6) -- and in the end every input record is in the output exactly once, in order, and the group's
committed offsets are at the input's end: nothing was lost or duplicated through the
migrations.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka.differential import Peer

DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE = 15, 69
#: KIP-1099's member types, and ConsumerGroupDescribe's answer for a classic group
CLASSIC, CONSUMER, NOT_A_CONSUMER_GROUP = 0, 1, "GROUP_ID_NOT_FOUND"
from tests.kip848_eos import Member, check_exactly_once, committed, prepare, write_input
from tests.kip848_eos_child import PARTITIONS, names
from tests.waiting import eventually

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(600)]
#: input records per partition written at the start and after each step
CHUNK = 40
RUN = names("migration")
#: (the protocol of the member replaced, of its replacement) per step, and the group's type after it
STEPS = [((0, "classic"), (0, "consumer"), "consumer"),
         ((1, "classic"), (1, "consumer"), "consumer"),
         ((0, "consumer"), (0, "classic"), "consumer"),
         ((1, "consumer"), (1, "classic"), "classic")]
#: the members' types ConsumerGroupDescribe answers at the start and after each step
MEMBER_TYPES = [NOT_A_CONSUMER_GROUP, [CLASSIC, CONSUMER], [CONSUMER, CONSUMER], [CLASSIC, CONSUMER],
                NOT_A_CONSUMER_GROUP]
#: DescribeGroups v5 and v6 of a Stable classic group of two members, and of a consumer group
CLASSIC_DESCRIBED = ((0, "Stable", "consumer", 2), (0, "Stable", "consumer", 2))
CONSUMER_DESCRIBED = ((0, "Dead", "", 0), (69, "Dead", "", 0))


def group_type_and_state(bootstrap: str) -> tuple[str, str] | None:
    """The group's type and state as ListGroups (v5) answers them; None if not listed."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    listed = admin.list_consumer_groups(request_timeout=10).result(15)
    for group in listed.valid:
        if group.group_id == RUN.group:
            return group.type.name.lower(), group.state.name.lower()
    return None


def member_types(peer: Peer) -> list[int] | str:
    """The sorted member types of the group (ConsumerGroupDescribe v1), or its error's name."""
    described = peer.request(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [RUN.group],
                                                          "include_authorized_operations": False})["groups"][0]
    if described["error_code"]:
        return NOT_A_CONSUMER_GROUP if described["error_code"] == 69 else str(described["error_code"])
    return sorted(m["member_type"] for m in described["members"])


def described(peer: Peer) -> tuple[tuple[int, str, str, int], ...]:
    """DescribeGroups v5 and v6: (error code, state, protocol type, members) of the group."""
    answers = [peer.request(DESCRIBE_GROUPS, v, {"groups": [RUN.group], "include_authorized_operations": False})
               for v in (5, 6)]
    return tuple((g["error_code"], g["group_state"], g["protocol_type"], len(g["members"]))
                 for g in (a["groups"][0] for a in answers))


def observed(peer: Peer) -> tuple[object, ...]:
    return group_type_and_state(peer.bootstrap), member_types(peer), described(peer)


def test_a_running_group_migrates_both_ways_member_by_member_exactly_once(kafka_and_exactly: Peer,
                                                                          tmp_path: Path) -> None:
    bootstrap = kafka_and_exactly.bootstrap
    prepare(bootstrap, CHUNK, RUN)
    types = ["classic"] + [t for _, _, t in STEPS]
    expected = [((t, "stable"), m, CLASSIC_DESCRIBED if t == "classic" else CONSUMER_DESCRIBED)
                for t, m in zip(types, MEMBER_TYPES)]
    members = {slot: Member(bootstrap, slot, tmp_path, "classic", "migration") for slot in (0, 1)}
    seen: list[object] = []

    def settles_as(step: int) -> bool:
        """The group looks as Kafka's does after ``step`` (the last look kept for the report)."""
        seen[step:] = [observed(kafka_and_exactly)]
        return seen[step] == expected[step]
    try:
        eventually(lambda: settles_as(0) and committed(bootstrap, RUN) == PARTITIONS * CHUNK, 120,
                   "a stable classic group of two, caught up")
        for step, ((slot, _), (_, protocol), expected_type) in enumerate(STEPS, 1):
            members[slot].stop()
            members[slot] = Member(bootstrap, slot, tmp_path, protocol, "migration")
            eventually(lambda: settles_as(step), 180, f"step {step}: a stable {expected_type} group as expected")
            write_input(bootstrap, step * CHUNK, (step + 1) * CHUNK, RUN)
            eventually(lambda: committed(bootstrap, RUN) == PARTITIONS * CHUNK * (step + 1), 180,
                       f"step {step}: the input copied")
        for member in members.values():
            member.stop()
        check_exactly_once(bootstrap, CHUNK * (len(STEPS) + 1), RUN)
    except BaseException as failure:
        for member in members.values():
            member.stop()
            failure.add_note(f"member {member.slot} on {kafka_and_exactly.name}: {member.errors()}")
        failure.add_note(f"seen on {kafka_and_exactly.name}: {seen}")
        raise
