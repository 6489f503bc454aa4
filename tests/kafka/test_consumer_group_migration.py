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
is GROUP_ID_NOT_FOUND there) -- and in the end every input record is in the output exactly once, in order, and the group's
committed offsets are at the input's end: nothing was lost or duplicated through the
migrations.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka.differential import Peer

CONSUMER_GROUP_DESCRIBE = 69
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


def test_a_running_group_migrates_both_ways_member_by_member_exactly_once(kafka_and_exactly: Peer,
                                                                          tmp_path: Path) -> None:
    bootstrap = kafka_and_exactly.bootstrap
    prepare(bootstrap, CHUNK, RUN)
    members = {slot: Member(bootstrap, slot, tmp_path, "classic", "migration") for slot in (0, 1)}
    seen = []
    try:
        eventually(lambda: group_type_and_state(bootstrap) == ("classic", "stable")
                   and committed(bootstrap, RUN) == PARTITIONS * CHUNK, 120, "a stable classic group, caught up")
        seen.append((group_type_and_state(bootstrap), member_types(kafka_and_exactly)))
        for step, ((slot, _), (_, protocol), expected_type) in enumerate(STEPS, 1):
            members[slot].stop()
            members[slot] = Member(bootstrap, slot, tmp_path, protocol, "migration")
            eventually(lambda: group_type_and_state(bootstrap) == (expected_type, "stable"), 180,
                       f"step {step}: a stable {expected_type} group")
            seen.append((group_type_and_state(bootstrap), member_types(kafka_and_exactly)))
            write_input(bootstrap, step * CHUNK, (step + 1) * CHUNK, RUN)
            eventually(lambda: committed(bootstrap, RUN) == PARTITIONS * CHUNK * (step + 1), 180,
                       f"step {step}: the input copied")
        for member in members.values():
            member.stop()
        assert seen == list(zip([("classic", "stable")] + [(t, "stable") for _, _, t in STEPS], MEMBER_TYPES))
        check_exactly_once(bootstrap, CHUNK * (len(STEPS) + 1), RUN)
    except BaseException as failure:
        for member in members.values():
            member.stop()
            failure.add_note(f"member {member.slot} on {kafka_and_exactly.name}: {member.errors()}")
        failure.add_note(f"seen on {kafka_and_exactly.name}: {seen}")
        raise
