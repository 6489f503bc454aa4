"""The console's exactly-once audit: ``/audit?group=G&input=T&output=U``, reached
from a group's page ("Audit"), with pickers for the input and output topics. It runs
the same audit as the API (``exactly/app/http/api/audit.py``: recorded in the mirror's table too)
and shows the verdict, each violation with its exact offsets, the chain of committed
transactions per input partition and the aborted attempts with their cause. The
route joins the ``ui`` blueprint.

Opened with a group alone, the form is filled from what the group did (:func:`suggest`):
the input is a topic it has committed offsets for, the output a topic written by the
transactional ids it commits with -- the pair an application of that group reads and
writes, not the alphabetically first topic twice; nothing runs until the user asks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from flask import render_template, request

from exactly.app.engine import mirror_reads, read_models
from exactly.app.http import mirror_db
from exactly.app.http.api.audit import run_audit
from exactly.app.http.console.blueprint import BROKER_WIDE, call, view
from exactly.app.http.console.topics import kafka_message
from exactly.app.http.errors import log_mirror_error
from exactly.coordinator import offsets_log
from exactly.storage import errors as e

log = logging.getLogger(__name__)


@dataclass
class Suggestion:
    """What a group's own history says its audit is about."""

    #: the topics it has committed (or pending) offsets for, most partitions first
    inputs: list[str] = field(default_factory=list)
    #: the topics its transactional ids wrote, most of those ids first
    outputs: list[str] = field(default_factory=list)
    #: the transactional ids that committed its offsets (finished ones from the mirror,
    #: open ones from its pending offsets)
    transactional_ids: list[str] = field(default_factory=list)


def suggest(group: str) -> Suggestion:
    """The inputs, outputs and transactional ids of ``group`` (empty if it is unknown)."""
    try:
        detail = call(read_models.group, group)
    except e.GroupIdNotFoundError:
        return Suggestion()
    committed: dict[str, int] = {}
    open_ids: set[str] = set()
    for o in detail["offsets"]:
        if o["committed_offset"] is not None or o["pending"]:
            committed[o["topic_name"]] = committed.get(o["topic_name"], 0) + 1
        open_ids.update(p["transactional_id"] for p in o["pending"] if p["transactional_id"])
    writers = _committed_with(group)
    for txn_id in open_ids - writers.keys():
        writers[txn_id] = _writes(txn_id)
    written: dict[str, int] = {}
    for topics in writers.values():
        for topic in topics - committed.keys():  # an input is not its own output
            written[topic] = written.get(topic, 0) + 1
    return Suggestion(sorted(committed, key=lambda t: (-committed[t], t)),
                      sorted(written, key=lambda t: (-written[t], t)), sorted(writers))


def _committed_with(group: str) -> dict[str, set[str]]:
    """The mirror's transactional ids that committed offsets on ``group``'s offsets
    partition, with the topics they wrote (none without a mirror). Groups sharing that
    partition (a hash of the group id over 50) share the answer."""
    db = mirror_db()
    if db is None:
        return {}
    partition = call(read_models.offsets_partition, group)
    try:
        return mirror_reads.committed_with(db, f"{offsets_log.TOPIC}-{partition}")
    except Exception as failure:  # the mirror is optional: the form is then filled from the offsets alone
        log_mirror_error(log, failure, "reading the SQLite mirror failed")
        return {}


def _writes(txn_id: str) -> set[str]:
    """The topics the open transaction of ``txn_id`` has written so far (not internal ones)."""
    try:
        partitions = call(read_models.transaction, txn_id)["partitions"]
    except e.TransactionalIdNotFoundError:
        return set()
    return {tp["topic_name"] for tp in partitions if not tp["topic_name"].startswith("__")}


@view("/audit", BROKER_WIDE)  # its pickers list every group and topic
def audit():
    args = request.args
    group, input_topic, output_topic = (args.get(name, "").strip() for name in ("group", "input", "output"))
    topics = [t["topic_name"] for t in call(read_models.topics)]
    suggested = suggest(group) if group else Suggestion()
    view, error = None, None
    if group and input_topic and output_topic:
        try:
            view = run_audit(group, input_topic, output_topic,
                             int(args["ratio"]) if args.get("ratio", "").isdigit() and int(args["ratio"]) else None)
        except e.KafkaError as failure:
            error = kafka_message(failure)
    return render_template("audit.html", group=group, topics=topics, suggested=suggested,
                           input=input_topic or next(iter(suggested.inputs), ""),
                           output=output_topic or next(iter(suggested.outputs), ""),
                           ratio=args.get("ratio", ""), view=view, error=error)
