"""The exactly-once audit as an Exactly resource of a consumer group:
``GET /v3/clusters/<c>/consumer-groups/<g>/audit?input=T&output=U`` (``&records_per_input=N``,
``&until=PARTITION:OFFSET`` repeatable).

The answer is the engine's ``AuditView`` (``exactly/app/engine/audit.py``) in the API's
spelling; ``ok`` is the verdict. The audit reads the logs on this request's thread,
never on the engine's loop. With the SQLite mirror, each audit also replaces the
group's rows of its ``audit_transactions`` table (``exactly/coordinator/mirror.py``), so Spark
reads the last audit of every group over JDBC.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from flask import Blueprint, current_app, jsonify

from exactly.app.engine.audit import AuditedTransaction, AuditView
from exactly.app.http import current_engine
from exactly.app.http.access import O, own
from exactly.app.http.api import models
from exactly.app.http.api.resources import cluster_id, crn, resource
from exactly.app.http.api.route import GROUP_PATH, ON_GROUP, Route, declare
from exactly.app.http.api.validation import query

bp = Blueprint("audit", __name__)


def _transaction(transaction: AuditedTransaction) -> dict[str, Any]:
    fields = dataclasses.asdict(transaction)
    fields["inputs"] = [{"partition_id": r.pop("partition"), **r} for r in fields["inputs"]]
    fields["outputs"] = [{"partition_id": b.pop("partition"), **b} for b in fields["outputs"]]
    return {**fields, "output_records": transaction.output_records}


def audit_resource(view: AuditView) -> dict[str, Any]:
    """The API's ``ExactlyOnceAudit`` of ``view``."""
    return resource(
        "ExactlyOnceAudit", ("consumer-groups", view.group_id, "audit"),
        crn(("consumer-group", view.group_id), ("audit", f"{view.input_topic}->{view.output_topic}")),
        cluster_id=cluster_id(), consumer_group_id=view.group_id, input_topic_name=view.input_topic,
        output_topic_name=view.output_topic, ok=view.ok, mode=view.mode, checked=view.checked,
        records_per_input=view.records_per_input,
        offsets_partition_id=view.offsets_partition,
        partitions=[{"partition_id": p.partition, "log_start_offset": p.log_start_offset,
                     "high_watermark": p.high_watermark, "committed_offset": p.committed_offset,
                     "audited_to": p.audited_to} for p in view.partitions],
        transactions=[_transaction(t) for t in view.transactions],
        aborted=[_transaction(t) for t in view.aborted],
        violations=[{"kind": v.kind.value, "topic_name": v.topic, "partition_id": v.partition,
                     "start_offset": v.start_offset, "end_offset": v.end_offset, "producer_id": v.producer_id,
                     "detail": v.detail, "likely_cause": v.likely_cause} for v in view.violations])


def run_audit(group_id: str, input_topic: str, output_topic: str, records_per_input: int | None = None,
              until: Mapping[int, int] | None = None) -> AuditView:
    """The audit (on this thread), recorded in the mirror's table when there is a mirror."""
    view = current_engine().audit(group_id, input_topic, output_topic, records_per_input, until)
    mirror = current_app.extensions.get("exactly.mirror")
    if mirror is not None:
        mirror.record_audit(view.group_id, view.input_topic, view.output_topic, view.mirror_rows())
    return view


@declare(bp, Route(
    "get", GROUP_PATH + "/audit", "Audit exactly-once", "Consumer Groups", 200, models.ExactlyOnceAudit,
    query=models.AuditQuery, needs=own(O.DESCRIBE, ON_GROUP),  # what the group's committed offsets show
    description="Exactly's audit of a consume-transform-produce group, from the durable logs: the chain of committed "
                "transactions per input partition with their input ranges and output batches, aborted attempts "
                "with their cause, and every violation with its exact offsets (ok: none)."))
def audit(group_id: str):
    wanted = query(models.AuditQuery)
    until = {int(partition): int(offset) for partition, offset in (pair.split(":") for pair in wanted.until)}
    return jsonify(audit_resource(run_audit(group_id, wanted.input, wanted.output, wanted.records_per_input, until)))
