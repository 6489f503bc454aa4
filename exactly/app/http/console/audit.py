"""The console's exactly-once audit: ``/audit?group=G&input=T&output=U``, reached
from a group's page ("Audit"), with pickers for the input and output topics. It runs
the same audit as the API (``exactly/app/http/api/audit.py``: recorded in the mirror's table too)
and shows the verdict, each violation with its exact offsets, the chain of committed
transactions per input partition and the aborted attempts with their cause. The
route joins the ``ui`` blueprint.
"""

from __future__ import annotations

from flask import render_template, request

from exactly.app.engine import read_models
from exactly.app.http.api.audit import run_audit
from exactly.app.http.console.blueprint import BROKER_WIDE, call, view
from exactly.app.http.console.topics import kafka_message
from exactly.storage import errors as e


@view("/audit", BROKER_WIDE)  # its pickers list every group and topic
def audit():
    args = request.args
    group, input_topic, output_topic = (args.get(name, "").strip() for name in ("group", "input", "output"))
    topics = [t["topic_name"] for t in call(read_models.topics)]
    view, error = None, None
    if group and input_topic and output_topic:
        try:
            view = run_audit(group, input_topic, output_topic,
                             int(args["ratio"]) if args.get("ratio", "").isdigit() and int(args["ratio"]) else None)
        except e.KafkaError as failure:
            error = kafka_message(failure)
    return render_template("audit.html", group=group, input=input_topic, output=output_topic, topics=topics,
                           ratio=args.get("ratio", ""), view=view, error=error)
