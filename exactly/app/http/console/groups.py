"""The console's consumer-group writes: reset an Empty group's offsets, delete a
topic's offsets and delete a group, as ``kafka-consumer-groups --reset-offsets``,
``--delete-offsets`` and ``--delete`` do (``exactly/app/engine/group_admin.py`` and the group
coordinator's ``delete_offsets`` and ``delete_group``). Both are
POST forms with the session's CSRF token, confirmed in the browser; a Kafka error
(NON_EMPTY_GROUP while consumers are in the group, GROUP_ID_NOT_FOUND, ...) comes
back as a flash with its name and code. The routes join the ``ui`` blueprint.
"""

from __future__ import annotations

from typing import Any

from flask import render_template, request, url_for

from exactly.app.engine import group_admin, read_models
from exactly.app.http import current_engine
from exactly.app.http.access import kafka
from exactly.app.http.console.blueprint import ON_GROUP, back, call, done, view
from exactly.app.http.console.topics import kafka_message, parse_time
from exactly.app.kafka.wire import ApiKey
from exactly.storage import errors as e


@view("/groups/<path:group_id>/reset-offsets", kafka(ApiKey.OFFSET_COMMIT, ON_GROUP), methods=("POST",))
def reset_group_offsets(group_id: str):
    """Reset (``action=execute``, the default) or preview the plan (``action=preview``,
    the tool's ``--dry-run``: the group's page again, with the plan and the form as sent)."""
    form = request.form
    execute = form.get("action", "execute") != "preview"
    engine = current_engine()
    try:
        result = engine.call(group_admin.reset_offsets, engine, group_id, form.get("to", ""),
                             _value(form.get("to", ""), form.get("value", "").strip()),
                             form.get("topic", "").strip() or None, execute)
    except e.KafkaError as error:
        if not execute:
            return _group_page(group_id, plan_error=kafka_message(error))
        return done(f"Could not reset the offsets of {group_id}: {kafka_message(error)}", "error",
                     back(url_for("ui.group", group_id=group_id)))
    if not execute:
        return _group_page(group_id, plan=result)
    moved = ", ".join(f"{r['topic_name']}-{r['partition_id']} → {r['offset']}" for r in result)
    return done(f"Reset the offsets of {group_id} to {form.get('to')}: {moved}.", "success",
                 back(url_for("ui.group", group_id=group_id)))


def _group_page(group_id: str, **preview: Any) -> str:
    """The group's page with a reset's plan (or why there is none) under its form."""
    return render_template("group.html", g=call(read_models.group, group_id), reset=request.form, **preview,
                           page_path=url_for("ui.group", group_id=group_id),
                           fragment_url=url_for("ui.group_fragment", group_id=group_id))


def _value(to: str, raw: str) -> int | None:
    """The form's value: an offset, or a time (ISO 8601 UTC or milliseconds)."""
    if to == "offset":
        if not raw.isdigit():
            raise e.InvalidRequestError(f"the offset must be a whole number ≥ 0, got {raw!r:.40}")
        return int(raw)
    return parse_time(raw) if to == "timestamp" else None


@view("/groups/<path:group_id>/delete-offsets", kafka(ApiKey.OFFSET_DELETE, ON_GROUP), methods=("POST",))
def delete_group_offsets(group_id: str):
    """OffsetDelete of every committed offset of one topic (``--delete-offsets --topic``)."""
    topic = request.form.get("topic", "")
    target = back(url_for("ui.group", group_id=group_id))
    engine = current_engine()
    try:
        partitions = [(o["topic_name"], o["partition_id"]) for o in call(read_models.group, group_id)["offsets"]
                      if o["topic_name"] == topic]
        errors = engine.call(engine.groups.delete_offsets, group_id, partitions)
    except e.KafkaError as error:
        return done(f"Could not delete the offsets of {group_id}: {kafka_message(error)}", "error", target)
    refused = sorted({kafka_message(error) for error in errors.values() if error is not None})
    if refused:
        return done(f"Kept the offsets of {group_id} on {topic}: {'; '.join(refused)}", "error", target)
    return done(f"Deleted the offsets of {group_id} on {topic} ({len(partitions)} partitions).", "success", target)


@view("/groups/<path:group_id>/delete", kafka(ApiKey.DELETE_GROUPS, ON_GROUP), methods=("POST",))
def delete_group(group_id: str):
    engine = current_engine()
    try:
        engine.call(engine.groups.delete_group, group_id)
    except e.KafkaError as error:
        return done(f"Could not delete group {group_id}: {kafka_message(error)}", "error",
                     url_for("ui.group", group_id=group_id))
    return done(f"Deleted group {group_id} and its committed offsets.", "success", url_for("ui.groups"))
