"""Consumer groups: list and describe (REST Proxy v3's ``consumer-groups``).

A group's description is the shared read model ``app.engine.queries.group``: members, the
generation, committed offsets, offsets still *pending* inside an open transaction
(they become committed at its COMMIT marker, or vanish at ABORT), and lag per
partition measured against the last stable offset -- the position a caught-up
read_committed consumer reaches, since transaction markers occupy offsets.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from app.engine import queries
from app.http import current_engine
from app.http.resources import crn, listing, resource

bp = Blueprint("groups", __name__)

BASE = "/v3/clusters/<cluster_id>/consumer-groups"


def _group(group: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """REST v3 names: ``consumer_group_id``, and Kafka's ``generation_id``."""
    group_id = group["group_id"]
    return resource("KafkaConsumerGroup", ("consumer-groups", group_id), crn(**{"consumer-group": group_id}),
                    cluster_id=current_engine().logs.cluster_id, consumer_group_id=group_id,
                    state=group["state"], generation_id=group["generation"],
                    protocol_type=group["protocol_type"], **extra)


@bp.get(BASE)
def list_groups():
    engine = current_engine()
    return jsonify(listing("KafkaConsumerGroupList", ("consumer-groups",),
                           [_group(g, members_count=g["members"]) for g in engine.call(queries.groups, engine)]))


@bp.get(BASE + "/<group_id>")
def describe_group(group_id: str):
    engine = current_engine()
    group = engine.call(queries.group, engine, group_id)
    return jsonify(_group(group, protocol=group["protocol"], leader=group["leader"], members=group["members"],
                          offsets=group["offsets"]))
