"""Classic consumer groups on Apache Kafka and on Exactly through raw requests, answers
compared field by field: join (KIP-394's MEMBER_ID_REQUIRED), sync, heartbeat, leave,
static members (KIP-345) fencing their old selves, offsets (commit, fetch, delete),
describe, list and delete. Kafka 4's consumer protocol (KIP-848) is issue 31's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kafka.differential import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    Normalizer,
    Peer,
    compared,
    create_topics,
    plain,
    retry,
    subscription,
)

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(120)]


def groups(peer: Peer, t: str) -> dict[str, Any]:
    create_topics(peer, {t: (2, {})})
    normalize, steps = Normalizer(), {}
    connection = peer.connection(client_id="differential")

    def ask(step: str, api: int, version: int, body: dict) -> dict:
        answer = retry(lambda: plain(connection.request(api, version, body)))
        steps[step] = normalize(answer)
        return answer
    group, static = t + "-g", t + "-static"

    def join(step: str, member: str = "", instance: str | None = None, group_id: str = group) -> dict:
        return ask(step, JOIN_GROUP, 5, {"group_id": group_id, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                                         "member_id": member, "group_instance_id": instance, "protocol_type": "consumer",
                                         "protocols": [{"name": "range", "metadata": subscription(t)}]})

    def heartbeat(step: str, generation: int, member: str, instance: str | None = None, group_id: str = group) -> None:
        ask(step, HEARTBEAT, 3, {"group_id": group_id, "generation_id": generation, "member_id": member,
                                 "group_instance_id": instance})

    def commit(step: str, generation: int, member: str, topic: str = t, group_id: str = group) -> None:
        ask(step, OFFSET_COMMIT, 7, {"group_id": group_id, "generation_id_or_member_epoch": generation,
                                     "member_id": member, "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                         {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                                          "committed_metadata": "meta"}]}]})

    def describe(step: str, *group_ids: str) -> None:
        ask(step, DESCRIBE_GROUPS, 4, {"groups": list(group_ids), "include_authorized_operations": False})
    member = join("first join")["member_id"]
    generation = join("join with the member id", member)["generation_id"]
    ask("sync", SYNC_GROUP, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                                "group_instance_id": None, "assignments": [{"member_id": member, "assignment": b"both"}]})
    heartbeat("heartbeat", generation, member)
    heartbeat("heartbeat, another generation", generation + 5, member)
    heartbeat("heartbeat, unknown member", generation, "nobody")
    heartbeat("heartbeat, unknown group", generation, "nobody", group_id=group + "-none")
    commit("commit", generation, member)
    commit("commit, another generation", generation + 1, member)
    commit("commit, unknown member", generation, "nobody")
    commit("commit, unknown topic", generation, member, topic=t + "-missing")
    commit("commit outside a group", -1, "", group_id=group + "-simple")
    ask("fetch", OFFSET_FETCH, 7, {"group_id": group, "require_stable": False, "topics": [{"name": t, "partition_indexes": [0, 1]}]})
    ask("fetch all", OFFSET_FETCH, 7, {"group_id": group, "require_stable": False, "topics": None})
    ask("fetch, unknown group", OFFSET_FETCH, 7, {"group_id": group + "-none", "require_stable": False,
                                                  "topics": [{"name": t, "partition_indexes": [0]}]})
    describe("described", group, group + "-none", group + "-simple")
    listed = plain(connection.request(LIST_GROUPS, 2, {}))
    steps["listed"] = normalize({**listed, "groups": [g for g in listed["groups"] if g["group_id"].startswith(t)]})
    ask("offset delete, subscribed", OFFSET_DELETE, 0, {"group_id": group, "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]})
    ask("delete, not empty", DELETE_GROUPS, 2, {"groups_names": [group, group + "-none"]})
    first = join("static join", "", "instance-1", static)
    ask("static sync", SYNC_GROUP, 3, {"group_id": static, "generation_id": first["generation_id"],
                                       "member_id": first["member_id"], "group_instance_id": "instance-1",
                                       "assignments": [{"member_id": first["member_id"], "assignment": b"a"}]})
    again = join("static rejoin", "", "instance-1", static)
    heartbeat("the fenced static member", first["generation_id"], first["member_id"], "instance-1", static)
    heartbeat("the static member", again["generation_id"], again["member_id"], "instance-1", static)
    describe("static described", static)
    ask("leave, wrong member ids", LEAVE_GROUP, 3, {"group_id": static, "members": [
        {"member_id": "nobody", "group_instance_id": "instance-1"}, {"member_id": "", "group_instance_id": "instance-9"}]})
    ask("leave by instance id", LEAVE_GROUP, 3, {"group_id": static, "members": [{"member_id": "", "group_instance_id": "instance-1"}]})
    describe("static after leaving", static)
    ask("leave", LEAVE_GROUP, 3, {"group_id": group, "members": [{"member_id": member, "group_instance_id": None}]})
    describe("empty", group)
    ask("offset delete", OFFSET_DELETE, 0, {"group_id": group, "topics": [{"name": t, "partitions": [
        {"partition_index": 0}, {"partition_index": 1}]}]})
    ask("delete", DELETE_GROUPS, 2, {"groups_names": [group, static]})
    describe("deleted", group)
    return steps


def test_classic_groups_answer_alike(brokers: tuple[Peer, Peer]) -> None:
    kafka, exactly = compared(brokers, groups, "groups")
    assert exactly == kafka
