"""Consumer groups: the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat, ConsumerGroupDescribe),
and DescribeGroups / ListGroups / DeleteGroups / OffsetDelete for tools.

ConsumerGroupHeartbeat names partitions by topic id; a topic id that no topic has
(deleted meanwhile) is left out of what a member says it owns, as Kafka does.

The group coordinator (``exactly/coordinator/group_coordinator.py``) does the work; a
JoinGroup waits there until the rebalance completes. When its client disconnects
meanwhile, the connection cancels the request and the coordinator stops waiting
for that member.
"""

from __future__ import annotations

from typing import Any, Iterable

from exactly.app.kafka import authorization
from exactly.app.kafka.api import ApiKey, EncodeOffLoop, RequestContext, error_code, serves
from exactly.app.kafka.authorization import C, G, T
from exactly.app.kafka.codec import millis
from exactly.app.security.acl import CLUSTER_NAME
from exactly.app.engine.views import GroupView
from exactly.coordinator.consumer_group import Partitions
from exactly.coordinator.consumer_group_coordinator import Heartbeat
from exactly.coordinator.group_metadata import GroupState
from exactly.storage.errors import GroupIdNotFoundError, KafkaError, MemberIdRequiredError, TopicAuthorizationFailedError

#: a JoinGroup leader answer whose members' metadata passes this is encoded off the loop
ENCODE_OFF_LOOP_BYTES = 1 << 20


@serves(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, request: Any) -> dict[str, Any] | EncodeOffLoop:
    """From v4 a dynamic member without a member id is answered MEMBER_ID_REQUIRED with
    one to join with (KIP-394); a static member (v5's group_instance_id) never is. From
    v9 a restarted static leader of a Stable group is told to skip the assignment."""
    session_timeout = millis(request.session_timeout)
    rebalance_timeout = millis(getattr(request, "rebalance_timeout", request.session_timeout))
    group_instance_id = getattr(request, "group_instance_id", None)
    try:
        authorization.check(ctx, ApiKey.JOIN_GROUP, G, request.group_id)
        joined = await ctx.engine.groups.join_group(
            request.group_id, request.member_id, request.protocol_type,
            [(p.name, p.metadata) for p in request.protocols], session_timeout, rebalance_timeout,
            group_instance_id, ctx.client_id or "", f"/{ctx.connection.host}",
            require_known_member_id=ctx.version >= 4 and group_instance_id is None,
            support_skipping_assignment=ctx.version >= 9)
    except MemberIdRequiredError as e:
        return {"error_code": error_code(e), "generation_id": -1, "member_id": e.member_id}
    except KafkaError as e:
        return {"error_code": error_code(e), "generation_id": -1, "member_id": request.member_id}
    response = {"error_code": 0, "generation_id": joined.generation, "protocol_type": joined.protocol_type,
                "protocol_name": joined.protocol or "", "leader": joined.leader,
                "skip_assignment": joined.skip_assignment, "member_id": joined.member_id,
                "members": [{"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
                            for member_id, instance_id, metadata in joined.members]}
    if sum(len(metadata) for _, _, metadata in joined.members) > ENCODE_OFF_LOOP_BYTES:
        return EncodeOffLoop(response)  # a big group's leader: every member's metadata
    return response


@serves(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, request: Any) -> dict:
    """From v5 the member names the generation's protocol type and name, checked, and
    the answer names them too."""
    try:
        authorization.check(ctx, ApiKey.SYNC_GROUP, G, request.group_id)
        assignment = await ctx.engine.groups.sync_group(
            request.group_id, request.generation_id, request.member_id,
            {a.member_id: a.assignment for a in request.assignments}, getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None), getattr(request, "protocol_name", None))
    except KafkaError as e:
        return {"error_code": error_code(e), "assignment": b""}
    group = ctx.engine.groups.describe_group(request.group_id)
    if group is not None and group.consumer is not None:  # a classic member of a consumer group: as it asked
        return {"error_code": 0, "assignment": assignment, "protocol_type": getattr(request, "protocol_type", None),
                "protocol_name": getattr(request, "protocol_name", None)}
    return {"error_code": 0, "assignment": assignment, "protocol_type": group and group.protocol_type,
            "protocol_name": group and group.protocol}


@serves(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, request: Any) -> dict:
    authorization.check(ctx, ApiKey.HEARTBEAT, G, request.group_id)
    await ctx.engine.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                                 getattr(request, "group_instance_id", None))
    return {"error_code": 0}


@serves(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, request: Any) -> dict:
    """Up to v2 one member, its error the answer's; from v3 (KIP-345) a batch of members,
    each by member id or -- an admin removing static members -- by instance id alone,
    each with its own error."""
    authorization.check(ctx, ApiKey.LEAVE_GROUP, G, request.group_id)
    if ctx.version < 3:
        await ctx.engine.groups.leave_group(request.group_id, request.member_id)
        return {"error_code": 0}
    return {"error_code": 0, "members": [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
         "error_code": await _leave(ctx, request.group_id, m.member_id, m.group_instance_id)}
        for m in request.members]}


async def _leave(ctx: RequestContext, group_id: str, member_id: str, group_instance_id: str | None) -> int:
    """One member's LeaveGroup; its error code."""
    try:
        await ctx.engine.groups.leave_group(group_id, member_id, group_instance_id)
    except KafkaError as e:
        return error_code(e)
    return 0


@serves(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, request: Any) -> dict:
    """A member's heartbeat in a KIP-848 consumer group: joins (epoch 0), leaves (-1, or
    -2 for a static member coming back), says what it owns, gets its epoch and
    assignment. From v1 the client makes its member id (an empty one is INVALID_REQUEST)."""
    try:
        authorization.check(ctx, ApiKey.CONSUMER_GROUP_HEARTBEAT, G, request.group_id)
        for topic in request.subscribed_topic_names or ():
            # Kafka's KafkaApis: every topic subscribed by name must be describable
            authorization.check(ctx, ApiKey.CONSUMER_GROUP_HEARTBEAT, T, topic)
        owned = None if request.topic_partitions is None else _by_name(ctx, request.topic_partitions)
        answer = await ctx.engine.groups.consumer_group_heartbeat(Heartbeat(
            request.group_id, request.member_id, request.member_epoch, request.instance_id, request.rack_id,
            millis(request.rebalance_timeout),
            None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
            getattr(request, "subscribed_topic_regex", None),  # v1+ (v0 was KIP-848's early access)
            request.server_assignor, owned, ctx.client_id or "",
            f"/{ctx.connection.host}", member_id_required=ctx.version >= 1,
            describable=lambda topic: authorization.allowed(ctx, ApiKey.CONSUMER_GROUP_HEARTBEAT, T, topic,
                                                            audit=False)))
    except KafkaError as e:
        return {"error_code": e.code, "error_message": str(e), "member_id": request.member_id or None,
                "member_epoch": -1, "heartbeat_interval": 0}
    assignment = None if answer.assignment is None else {
        "topic_partitions": _by_id(ctx, answer.assignment)}
    return {"error_code": 0, "member_id": answer.member_id, "member_epoch": answer.member_epoch,
            "heartbeat_interval": answer.heartbeat_interval_ms, "assignment": assignment}


def _by_name(ctx: RequestContext, topic_partitions: Iterable[Any]) -> Partitions:
    """Partitions named by topic id, by topic name (unknown ids left out)."""
    owned: set[tuple[str, int]] = set()
    for entry in topic_partitions:
        name = ctx.engine.groups.topic_name(entry.topic_id) if entry.topic_id is not None else None
        if name is not None:
            owned.update((name, p) for p in entry.partitions)
    return frozenset(owned)


def _by_id(ctx: RequestContext, partitions: Partitions, with_names: bool = False) -> list[dict]:
    """Partitions grouped by topic, each named by its id (and name)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    entries = []
    for topic, indexes in by_topic.items():
        info = ctx.engine.topics.topic_info(topic)
        if info is None:
            continue
        entry = {"topic_id": info.topic_id, "partitions": indexes}
        if with_names:
            entry["topic_name"] = topic
        entries.append(entry)
    return entries


@serves(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: RequestContext, request: Any) -> dict:
    """Each consumer group's epochs, assignor, members with their epochs, current and
    target assignments; a group that does not exist or is classic: GROUP_ID_NOT_FOUND,
    one the principal may not Describe: GROUP_AUTHORIZATION_FAILED, one assigned a topic
    the principal may not Describe: TOPIC_AUTHORIZATION_FAILED, with nothing of the group
    (Kafka's KAFKA-18813: a group must not name a topic its reader may not see)."""
    described = []
    asked = request.include_authorized_operations
    for group_id in request.group_ids:
        # a group not described: its fields' schema defaults, as Kafka 4.4 answers it
        empty = {"group_id": group_id, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                 "assignor_name": "", "members": [], "authorized_operations": authorization.NOT_REQUESTED}
        if not authorization.allowed(ctx, ApiKey.CONSUMER_GROUP_DESCRIBE, G, group_id):
            error = authorization.denial(G, group_id)
            described.append({**empty, "error_code": error.code, "error_message": str(error)})
            continue
        group = ctx.engine.groups.describe_group(group_id)
        if group is None or group.consumer is None or not group.live:
            error = GroupIdNotFoundError(f"Group {group_id} is not a consumer group." if group is not None
                                         else f"Group {group_id} not found.")
            described.append({**empty, "error_code": error.code, "error_message": str(error)})
            continue
        consumer = group.consumer
        topics = {topic for m in consumer.members
                  for topic, _ in m.assigned | consumer.target.get(m.member_id, frozenset())}
        if not all(authorization.allowed(ctx, ApiKey.CONSUMER_GROUP_DESCRIBE, T, topic) for topic in sorted(topics)):
            error = TopicAuthorizationFailedError("The described group uses topics that the client is not "
                                                  "authorized to describe.")
            described.append({**empty, "error_code": error.code, "error_message": str(error)})
            continue
        described.append({
            "error_code": 0, "group_id": group_id, "group_state": consumer.state.value,
            "group_epoch": consumer.group_epoch, "assignment_epoch": consumer.assignment_epoch,
            "assignor_name": ctx.engine.groups.assignor_of(group_id),
            "authorized_operations": authorization.authorized_operations(ctx, G, group_id, asked),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": {"topic_partitions": _by_id(ctx, m.assigned, with_names=True)},
                "target_assignment": {"topic_partitions": _by_id(
                    ctx, consumer.target.get(m.member_id, frozenset()), with_names=True)},
                # KIP-1099: 0 a member of the classic protocol (an online migration), 1 of the consumer's
                "member_type": 0 if m.classic is not None else 1}
                for m in consumer.members]})
    return {"groups": described}


@serves(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx: RequestContext, request: Any) -> dict:
    """Each group's state and members; an unknown group is described as Dead, as Kafka
    does at these versions; one the principal may not Describe is GROUP_AUTHORIZATION_FAILED.
    From v3 the principal's authorized operations on each group, when asked."""
    described = []
    asked = getattr(request, "include_authorized_operations", False)
    for group_id in request.groups:
        if not authorization.allowed(ctx, ApiKey.DESCRIBE_GROUPS, G, group_id):
            described.append({"error_code": authorization.denial(G, group_id).code, "group_id": group_id,
                              "authorized_operations": authorization.NOT_REQUESTED})
            continue
        operations = authorization.authorized_operations(ctx, G, group_id, asked)
        group = ctx.engine.groups.describe_group(group_id)
        if group is None or group.consumer is not None:
            described.append(_not_classic(ctx.version, group_id, group, operations))
            continue
        stable = group.state is GroupState.STABLE
        described.append({
            "error_code": 0, "group_id": group_id, "group_state": group.state.value,
            "authorized_operations": operations,
            "protocol_type": group.protocol_type or "", "protocol_data": group.protocol or "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata if stable else b"",
                         "member_assignment": m.assignment if stable else b""}
                        for m in group.members]})
    return {"groups": described}


def _not_classic(version: int, group_id: str, group: GroupView | None, operations: int) -> dict:
    """DescribeGroups of a group that does not exist or is a consumer group (KIP-848, its
    classic members included: ConsumerGroupDescribe describes it) -- described as Dead, as
    Kafka 4.4 does; from v6 (KIP-1043) Dead with GROUP_ID_NOT_FOUND and a message."""
    if version >= 6:
        message = f"Group {group_id} is not a classic group." if group is not None else f"Group {group_id} not found."
        return {"error_code": GroupIdNotFoundError.code, "error_message": message, "group_id": group_id,
                "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": operations}
    return {"error_code": 0, "group_id": group_id, "group_state": GroupState.DEAD.value,
            "authorized_operations": operations}


@serves(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, request: Any) -> dict:
    """Every live group to a principal that may Describe the cluster, else those it may
    Describe. v4 filters by state (KIP-518), v5 by type (KIP-848: ``classic``,
    ``consumer``), both case-insensitive as Kafka compares them; v4+ answers each
    group's state, v5 its type."""
    everything = authorization.allowed(ctx, ApiKey.LIST_GROUPS, C, CLUSTER_NAME, audit=False)
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    return {"error_code": 0, "groups": [
        {"group_id": group.group_id, "protocol_type": "consumer" if group.consumer else group.protocol_type or "",
         "group_state": group.state_name, "group_type": group.group_type}
        for group in ctx.engine.groups.list_groups() if group.live
        and (not states or group.state_name.lower() in states)
        and (not types or group.group_type in types)
        and (everything or authorization.allowed(ctx, ApiKey.LIST_GROUPS, G, group.group_id, audit=False))]}


@serves(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, request: Any) -> dict:
    """Each group's deletion (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP), one after another."""
    results = []
    for group_id in request.groups_names:
        try:
            authorization.check(ctx, ApiKey.DELETE_GROUPS, G, group_id)
            await ctx.engine.groups.delete_group(group_id)
        except KafkaError as e:
            results.append({"group_id": group_id, "error_code": error_code(e)})
            continue
        results.append({"group_id": group_id, "error_code": 0})
    return {"results": results}


@serves(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, request: Any) -> dict:
    """Delete a group's offsets of some partitions (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
    GROUP_AUTHORIZATION_FAILED without Delete on the group for the whole request;
    GROUP_SUBSCRIBED_TO_TOPIC, TOPIC_AUTHORIZATION_FAILED without Read on the topic per partition)."""
    readable = {t.name: authorization.allowed(ctx, ApiKey.OFFSET_DELETE, T, t.name) for t in request.topics}
    asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if readable[t.name]]
    try:
        authorization.check(ctx, ApiKey.OFFSET_DELETE, G, request.group_id)
        errors: dict = await ctx.engine.groups.delete_offsets(request.group_id, asked)
    except KafkaError as e:
        return {"error_code": error_code(e), "topics": []}
    errors.update({(t.name, p.partition_index): authorization.denial(T, t.name)
                   for t in request.topics for p in t.partitions if not readable[t.name]})
    return {"error_code": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": error_code(errors[(t.name, p.partition_index)])}
                                        for p in t.partitions]} for t in request.topics]}
