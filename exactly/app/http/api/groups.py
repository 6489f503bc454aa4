"""Consumer groups as REST Proxy v3 resources (``consumer-groups``).

A group's description is the shared read model ``exactly.app.engine.read_models.group``: members
(with the partitions each is assigned, for a group of the consumer protocol),
committed offsets, offsets still *pending* inside an open transaction (they become
committed at its COMMIT marker, or vanish at ABORT), and per partition the lag: the
records a read_committed consumer at the committed offset would still receive
before the last stable offset. The proxy's resources are views of it:

* ``.../consumer-groups/<g>`` -- the group (Exactly adds its generation, members and
  offsets); its ``state`` is Kafka's state in the proxy's spelling (``STABLE``);
* ``.../consumers`` and ``.../consumers/<member id>`` -- the members, and
  ``.../consumers/<c>/assignments[/<topic>/partitions/<p>]`` their partitions;
* ``.../lags[/<topic>/partitions/<p>]`` -- per partition with a committed offset:
  ``current_offset`` (committed), ``log_end_offset`` (the LSO: where a read_committed
  consumer ends, as the proxy's own lag uses read_committed end offsets) and ``lag``
  (records, so markers and aborted records do not count: it can be less than
  ``log_end_offset - current_offset``), with the member assigned the partition;
* ``.../lag-summary`` -- the largest lag, where it is, and the total.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, jsonify

from exactly.app.engine import read_models
from exactly.app.http import access, current_engine
from exactly.app.http.access import GROUP, kafka, listed
from exactly.app.http.api import models
from exactly.app.http.api.resources import cluster_id, crn, listing, related, resource
from exactly.app.http.api.route import CLUSTER_PATH, GROUP_PATH, ON_GROUP, Route, declare
from exactly.app.kafka.wire import ApiKey

bp = Blueprint("groups", __name__)

CONSUMER = GROUP_PATH + "/consumers/{consumer_id}"
TAG = "Consumer Groups"
#: a group's detail carries its offsets, shown as ``access.visible_group`` shows them
DESCRIBE_GROUP = kafka(ApiKey.DESCRIBE_GROUPS, ON_GROUP) + access.GROUP_SHOWN
#: the lags are of the group's committed offsets, as OffsetFetch reads them
FETCH_OFFSETS = kafka(ApiKey.OFFSET_FETCH, ON_GROUP) + access.GROUP_SHOWN


def _group_crn(group_id: str, *parts: tuple[str, Any]) -> str:
    return crn(("consumer-group", group_id), *parts)


def _group(group: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """REST v3's KafkaConsumerGroup; Exactly adds Kafka's ``generation_id`` and
    ``protocol_type`` (and, described, the members and offsets)."""
    group_id = group["group_id"]
    return resource("KafkaConsumerGroup", ("consumer-groups", group_id), _group_crn(group_id),
                    cluster_id=cluster_id(), consumer_group_id=group_id,
                    is_simple=not group["protocol_type"], type=group["type"].upper(),
                    # a consumer group with members of the classic protocol (migrating)
                    is_mixed_consumer_group=group["mixed"],
                    partition_assignor=group["protocol"] or "",
                    state=_state(group["state"]), coordinator=related("brokers", current_engine().topics.node_id),
                    consumers=related("consumer-groups", group_id, "consumers"),
                    lag_summary=related("consumer-groups", group_id, "lag-summary"),
                    generation_id=group["generation"], protocol_type=group["protocol_type"], **extra)


def _state(kafka_state: str) -> str:
    """Kafka's group state (``PreparingRebalance``) as the proxy spells it
    (``PREPARING_REBALANCE``)."""
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(kafka_state)).upper()


def _describe(group_id: str) -> dict[str, Any]:
    engine = current_engine()
    return access.visible_group(engine.call(read_models.group, engine, group_id))


@declare(bp, Route("get", CLUSTER_PATH + "/consumer-groups", "List consumer groups", TAG, 200,
                   models.listing(models.ConsumerGroupSummary),
                   needs=kafka(ApiKey.LIST_GROUPS, listed(GROUP), or_cluster=True)))
def list_groups():
    engine = current_engine()
    found = engine.call(read_models.groups, engine)
    shown = access.visible(GROUP, (g["group_id"] for g in found))  # all of them with Describe on the Cluster
    return jsonify(listing("KafkaConsumerGroupList", ("consumer-groups",),
                           [_group(g, members_count=g["members"]) for g in found if g["group_id"] in shown]))


@declare(bp, Route("get", GROUP_PATH, "Get consumer group", TAG, 200, models.ConsumerGroupDetail,
                   description="Members, committed and pending offsets, lag against the LSO.", needs=DESCRIBE_GROUP))
def describe_group(group_id: str):
    group = _describe(group_id)
    return jsonify(_group(group, protocol=group["protocol"], leader=group["leader"], members=group["members"],
                          offsets=group["offsets"], assignment_epoch=group.get("assignment_epoch")))


# -- consumers and their assignments ----------------------------------------------------


def _assigned(member: dict[str, Any]) -> list[tuple[str, int]]:
    """The member's partitions (none when its group's protocol is not the consumer's)."""
    return [(a["topic_name"], a["partition_id"]) for a in member.get("assignment") or ()]


def _consumer(group_id: str, member: dict[str, Any]) -> dict[str, Any]:
    member_id = member["member_id"]
    return resource("KafkaConsumer", ("consumer-groups", group_id, "consumers", member_id),
                    _group_crn(group_id, ("consumer", member_id)), cluster_id=cluster_id(),
                    consumer_group_id=group_id, consumer_id=member_id, instance_id=member["group_instance_id"],
                    client_id=member["client_id"],
                    assignments=related("consumer-groups", group_id, "consumers", member_id, "assignments"),
                    client_host=member["client_host"], session_timeout_ms=member["session_timeout_ms"])


def _member(group: dict[str, Any], consumer_id: str) -> dict[str, Any]:
    found = next((m for m in group["members"] if m["member_id"] == consumer_id), None)
    if found is None:
        abort(404, f"group {group['group_id']!r} has no consumer {consumer_id!r}")
    return found


def _assignment(group_id: str, member_id: str, topic: str, partition: int) -> dict[str, Any]:
    return resource("KafkaConsumerAssignment",
                    ("consumer-groups", group_id, "consumers", member_id, "assignments", topic, "partitions",
                     partition),
                    _group_crn(group_id, ("consumer", member_id), ("assignment", topic), ("partition", partition)),
                    cluster_id=cluster_id(), consumer_group_id=group_id, consumer_id=member_id, topic_name=topic,
                    partition_id=partition, partition=related("topics", topic, "partitions", partition),
                    lag=related("consumer-groups", group_id, "lags", topic, "partitions", partition))


@declare(bp, Route("get", GROUP_PATH + "/consumers", "List consumers", TAG, 200, models.listing(models.Consumer),
                   needs=DESCRIBE_GROUP))
def list_consumers(group_id: str):
    group = _describe(group_id)
    return jsonify(listing("KafkaConsumerList", ("consumer-groups", group_id, "consumers"),
                           [_consumer(group_id, m) for m in group["members"]]))


@declare(bp, Route("get", CONSUMER, "Get consumer", TAG, 200, models.Consumer, needs=DESCRIBE_GROUP))
def get_consumer(group_id: str, consumer_id: str):
    return jsonify(_consumer(group_id, _member(_describe(group_id), consumer_id)))


@declare(bp, Route("get", CONSUMER + "/assignments", "List consumer assignments", TAG, 200,
                   models.listing(models.ConsumerAssignment), needs=DESCRIBE_GROUP))
def list_assignments(group_id: str, consumer_id: str):
    member = _member(_describe(group_id), consumer_id)
    return jsonify(listing("KafkaConsumerAssignmentList",
                           ("consumer-groups", group_id, "consumers", consumer_id, "assignments"),
                           [_assignment(group_id, consumer_id, t, p) for t, p in _assigned(member)]))


@declare(bp, Route("get", CONSUMER + "/assignments/{topic_name}/partitions/{partition_id}", "Get consumer assignment",
                   TAG, 200, models.ConsumerAssignment, needs=DESCRIBE_GROUP))
def get_assignment(group_id: str, consumer_id: str, topic_name: str, partition_id: int):
    member = _member(_describe(group_id), consumer_id)
    if (topic_name, partition_id) not in _assigned(member):
        abort(404, f"consumer {consumer_id!r} is not assigned {topic_name}-{partition_id}")
    return jsonify(_assignment(group_id, consumer_id, topic_name, partition_id))


# -- lags -------------------------------------------------------------------------------


def _lags(group: dict[str, Any]) -> list[dict[str, Any]]:
    """KafkaConsumerLag of every partition the group has committed an offset for or is
    assigned (``current_offset`` -1, as OffsetFetch answers: counted from the log
    start, as Kafka's tools do), with the member assigned it (empty ids when none is)."""
    group_id = group["group_id"]
    owner = {tp: m for m in group["members"] for tp in _assigned(m)}
    lags = []
    for o in group["offsets"]:
        if o["lag"] is None:
            continue  # only pending offsets, or a deleted topic's
        topic, partition = o["topic_name"], o["partition_id"]
        member = owner.get((topic, partition), {})
        lags.append(resource(
            "KafkaConsumerLag", ("consumer-groups", group_id, "lags", topic, "partitions", partition),
            _group_crn(group_id, ("lag", topic), ("partition", partition)), cluster_id=cluster_id(),
            consumer_group_id=group_id, topic_name=topic, partition_id=partition,
            current_offset=-1 if o["committed_offset"] is None else o["committed_offset"], log_end_offset=o["last_stable_offset"], lag=o["lag"],
            consumer_id=member.get("member_id", ""), instance_id=member.get("group_instance_id"),
            client_id=member.get("client_id", ""), high_watermark=o["high_watermark"], lag_exact=o["lag_exact"]))
    return lags


@declare(bp, Route("get", GROUP_PATH + "/lags", "List consumer lags", TAG, 200, models.listing(models.ConsumerLag),
                   description="Per partition with a committed offset: the records a read_committed consumer would "
                               "still receive.", needs=FETCH_OFFSETS))
def list_lags(group_id: str):
    return jsonify(listing("KafkaConsumerLagList", ("consumer-groups", group_id, "lags"),
                           _lags(_describe(group_id))))


@declare(bp, Route("get", GROUP_PATH + "/lags/{topic_name}/partitions/{partition_id}", "Get consumer lag", TAG, 200,
                   models.ConsumerLag, needs=FETCH_OFFSETS))
def get_lag(group_id: str, topic_name: str, partition_id: int):
    found = next((lag for lag in _lags(_describe(group_id))
                  if (lag["topic_name"], lag["partition_id"]) == (topic_name, partition_id)), None)
    if found is None:
        abort(404, f"group {group_id!r} has no committed offset for {topic_name}-{partition_id}")
    return jsonify(found)


@declare(bp, Route("get", GROUP_PATH + "/lag-summary", "Get consumer group lag summary", TAG, 200,
                   models.ConsumerGroupLagSummary, needs=FETCH_OFFSETS))
def lag_summary(group_id: str):
    """The partition with the largest lag (the first, in topic and partition order, on
    a tie) and the total; a group without committed offsets has lag 0 and no maximum.
    ``lag_exact`` (Exactly's) is false when any partition's lag is an upper bound."""
    lags = _lags(_describe(group_id))
    top = max(lags, key=lambda lag: lag["lag"], default=None)
    return jsonify(resource(
        "KafkaConsumerGroupLagSummary", ("consumer-groups", group_id, "lag-summary"),
        _group_crn(group_id) + "/lag-summary", cluster_id=cluster_id(), consumer_group_id=group_id,
        max_lag_consumer_id=top["consumer_id"] if top else "",
        max_lag_instance_id=top["instance_id"] if top else None,
        max_lag_client_id=top["client_id"] if top else "",
        max_lag_topic_name=top["topic_name"] if top else "",
        max_lag_partition_id=top["partition_id"] if top else -1,
        max_lag=top["lag"] if top else 0, total_lag=sum(lag["lag"] for lag in lags),
        lag_exact=all(lag["lag_exact"] for lag in lags),
        max_lag_consumer=(related("consumer-groups", group_id, "consumers", top["consumer_id"])
                          if top and top["consumer_id"] else None),
        max_lag_partition=related("topics", top["topic_name"], "partitions", top["partition_id"]) if top else None))
