"""A KIP-848 group as the REST API and the console show it: type CONSUMER, its
consumer-protocol state, the group and assignment epochs, and per member its epoch,
reconciliation state, partitions, the ones it must still revoke and its target
assignment -- mid-rebalance, where they differ; a group migrating from the classic
protocol is mixed, its classic members shown as such."""

from __future__ import annotations

from exactly.app import Broker
from exactly.app.http import create_app
from exactly.coordinator import consumer_protocol
from exactly.coordinator.consumer_group_coordinator import Heartbeat

SUBSCRIBE = dict(rebalance_timeout_ms=30_000, subscribed_topic_names=("t",))


def _heartbeat(broker: Broker, member_id: str, epoch: int, owned=None, **fields):
    request = Heartbeat("g", member_id, epoch, owned=owned, client_id=f"client-{member_id}", **fields)
    return broker.engine.call(broker.engine.groups.coordinator.consumer_group_heartbeat, request)


def test_a_consumer_group_mid_rebalance_on_the_rest_api_and_the_console(broker: Broker) -> None:
    broker.create_topic("t", 4)
    a = _heartbeat(broker, "a", 0, **SUBSCRIBE)
    a = _heartbeat(broker, "a", a.member_epoch, owned=a.assignment)
    _heartbeat(broker, "b", 0, **SUBSCRIBE)
    _heartbeat(broker, "a", a.member_epoch, owned=a.assignment)
    # a has not revoked yet: it keeps two partitions, must give two up, and b waits for them
    app = create_app(broker.engine, test_config={"TESTING": True})
    client = app.test_client()
    group = client.get(f"/v3/clusters/{broker.cluster_id}/consumer-groups/g").get_json()
    assert (group["type"], group["is_mixed_consumer_group"], group["state"]) == ("CONSUMER", False, "RECONCILING")
    assert (group["generation_id"], group["assignment_epoch"], group["partition_assignor"]) == (2, 2, "uniform")
    members = {m["member_id"]: m for m in group["members"]}
    assert (members["a"]["member_epoch"], members["a"]["member_state"]) == (1, "UNREVOKED_PARTITIONS")
    assert len(members["a"]["assignment"]) == 2 and len(members["a"]["pending_revocation"]) == 2
    assert members["a"]["target_assignment"] == members["a"]["assignment"]
    assert members["b"]["assignment"] == [] and members["b"]["target_assignment"] == members["a"]["pending_revocation"]
    assert members["b"]["member_state"] == "UNRELEASED_PARTITIONS"
    listed = client.get(f"/v3/clusters/{broker.cluster_id}/consumer-groups").get_json()["data"]
    assert [(g["consumer_group_id"], g["type"], g["members_count"]) for g in listed] == [("g", "CONSUMER", 2)]

    page = client.get("/groups/g").get_data(as_text=True)
    assert 'id="consumer-members"' in page and "group epoch 2" in page
    assert 'data-member="a"' in page and "unrevoked partitions" in page and "client-b" in page


def test_a_group_migrating_from_the_classic_protocol_is_mixed_its_classic_members_shown_as_such(
        broker: Broker) -> None:
    broker.create_topic("t", 4)
    groups = broker.engine.groups
    protocols = [("range", consumer_protocol.encode_subscription(["t"]))]
    joined = broker.engine.call(groups.join_group, "g", "", "consumer", protocols, 10_000, 20_000, None, "classic-c")
    broker.engine.call(groups.sync_group, "g", joined.generation, joined.member_id,
                       {joined.member_id: consumer_protocol.encode_assignment([("t", p) for p in range(4)])})
    _heartbeat(broker, "a", 0, **SUBSCRIBE)  # the group becomes a consumer group, the classic member in it
    app = create_app(broker.engine, test_config={"TESTING": True})
    client = app.test_client()
    group = client.get(f"/v3/clusters/{broker.cluster_id}/consumer-groups/g").get_json()
    assert (group["type"], group["is_mixed_consumer_group"]) == ("CONSUMER", True)
    members = {m["member_id"]: m for m in group["members"]}
    assert (members[joined.member_id]["member_type"], members[joined.member_id]["session_timeout_ms"]) == (
        "classic", 10_000)
    assert members["a"]["member_type"] == "consumer"
    assert len(members[joined.member_id]["assignment"]) == 4  # it kept its partitions
    page = client.get("/groups/g").get_data(as_text=True)
    assert page.count("data-member-type") == 1 and "classic protocol" in page
