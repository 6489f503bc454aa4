"""The online migration of a running group between the classic and the consumer protocol
(KIP-848), with real clients: the scenario tests/kafka/test_consumer_group_migration.py
runs on Kafka 4.4 and Exactly alike, and tests/test_consumer_group_migration_crash.py on
Exactly SIGKILLed at two of its steps.

Two members of the transactional consume-transform-produce application
(tests/kip848_eos_child.py, confluent-kafka) start with ``group.protocol=classic``; they
are replaced one at a time by ``group.protocol=consumer`` members, then back by classic
ones; after each step more input is written and copied by the group as it is then. At
each step the group looks as Kafka's does (:data:`EXPECTED`): its type and state
(ListGroups v5) -- classic, upgraded to consumer by the first consumer-protocol member
(the remaining classic member inside it), consumer, consumer with a classic member
again, and classic once the last consumer-protocol member leaves -- its members' types
(ConsumerGroupDescribe v1's KIP-1099 member type; a classic group is GROUP_ID_NOT_FOUND
there) and what DescribeGroups says (a consumer group, its classic members included, is
Dead to it, GROUP_ID_NOT_FOUND from v6). In the end every input record is in the output
exactly once, in order, and the group's committed offsets are at the input's end:
nothing was lost or duplicated through the migrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from confluent_kafka.admin import AdminClient

from tests.kafka.differential import Peer
from tests.kip848_eos import Member, check_exactly_once, committed, prepare, write_input
from tests.kip848_eos_child import PARTITIONS, names
from tests.waiting import eventually

DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE = 15, 69
#: KIP-1099's member types, and ConsumerGroupDescribe's answer for a classic group
CLASSIC, CONSUMER, NOT_A_CONSUMER_GROUP = 0, 1, "GROUP_ID_NOT_FOUND"
#: input records per partition written at the start and after each step
CHUNK = 40
RUN = names("migration")
#: (the slot whose member is replaced, the protocol of its replacement) per step
STEPS = [(0, "consumer"), (1, "consumer"), (0, "classic"), (1, "classic")]
#: DescribeGroups v5 and v6 of a Stable classic group of two members, and of a consumer group
CLASSIC_DESCRIBED = ((0, "Stable", "consumer", 2), (0, "Stable", "consumer", 2))
CONSUMER_DESCRIBED = ((0, "Dead", "", 0), (69, "Dead", "", 0))
#: what :func:`observed` sees at the start and once the group settled after each step
EXPECTED = [(("classic", "stable"), NOT_A_CONSUMER_GROUP, CLASSIC_DESCRIBED),
            (("consumer", "stable"), [CLASSIC, CONSUMER], CONSUMER_DESCRIBED),
            (("consumer", "stable"), [CONSUMER, CONSUMER], CONSUMER_DESCRIBED),
            (("consumer", "stable"), [CLASSIC, CONSUMER], CONSUMER_DESCRIBED),
            (("classic", "stable"), NOT_A_CONSUMER_GROUP, CLASSIC_DESCRIBED)]


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


def run(peer: Peer, logs: Path, after_step: Callable[[int], None] = lambda step: None,
        settle_s: float = 180) -> None:
    """The scenario on ``peer``, its members' logs in ``logs``; ``after_step(step)`` runs once
    the group settled after each step (0: the start), and the group must then look as it
    did before more input is written (a broker restart keeps it)."""
    bootstrap = peer.bootstrap
    prepare(bootstrap, CHUNK, RUN)
    members = {slot: Member(bootstrap, slot, logs, "classic", "migration") for slot in (0, 1)}
    seen: list[object] = []

    def settles_as(step: int) -> bool:
        """The group looks as expected after ``step`` (the last look kept for the report)."""
        try:
            seen[step:] = [observed(peer)]
        except Exception as e:  # noqa: BLE001 -- the broker is restarting: not yet
            seen[step:] = [repr(e)]
        return seen[step] == EXPECTED[step]
    try:
        for step in range(len(STEPS) + 1):
            if step:
                slot, protocol = STEPS[step - 1]
                members[slot].stop()
                members[slot] = Member(bootstrap, slot, logs, protocol, "migration")
            eventually(lambda: settles_as(step), settle_s, f"step {step}: the group as {EXPECTED[step]}")
            after_step(step)
            eventually(lambda: settles_as(step), settle_s, f"step {step}, after: the group as {EXPECTED[step]}")
            if step:
                write_input(bootstrap, step * CHUNK, (step + 1) * CHUNK, RUN)
            eventually(lambda: committed(bootstrap, RUN) == PARTITIONS * CHUNK * (step + 1), settle_s,
                       f"step {step}: the input copied")
        for member in members.values():
            member.stop()
        check_exactly_once(bootstrap, CHUNK * (len(STEPS) + 1), RUN)
    except BaseException as failure:
        for member in members.values():
            member.stop()
            failure.add_note(f"member {member.slot} on {peer.name}: {member.errors()}")
        failure.add_note(f"seen on {peer.name}: {seen}")
        raise
