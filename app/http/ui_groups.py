"""The console's consumer-group writes: reset an Empty group's offsets and delete a
group, as ``kafka-consumer-groups --reset-offsets`` and ``--delete`` do
(``app/engine/group_admin.py`` and the group coordinator's ``delete_group``). Both are
POST forms with the session's CSRF token, confirmed in the browser; a Kafka error
(NON_EMPTY_GROUP while consumers are in the group, GROUP_ID_NOT_FOUND, ...) comes
back as a flash with its name and code. The routes join the ``ui`` blueprint.
"""

from __future__ import annotations

from flask import request, url_for

from app.engine import group_admin
from app.http import current_engine
from app.http.ui import _back, _done, bp
from app.http.ui_topics import kafka_message, parse_time
from storage import errors as e


@bp.post("/groups/<path:group_id>/reset-offsets")
def reset_group_offsets(group_id: str):
    target = _back(url_for("ui.group", group_id=group_id))
    form = request.form
    to = form.get("to", "")
    topic = form.get("topic", "").strip() or None
    engine = current_engine()
    try:
        value = _value(to, form.get("value", "").strip())
        result = engine.call(group_admin.reset_offsets, engine, group_id, to, value, topic)
    except e.KafkaError as error:
        return _done(f"Could not reset the offsets of {group_id}: {kafka_message(error)}", "error", target)
    moved = ", ".join(f"{r['topic_name']}-{r['partition_id']} → {r['offset']}" for r in result)
    return _done(f"Reset the offsets of {group_id} to {to}: {moved}.", "success", target)


def _value(to: str, raw: str) -> int | None:
    """The form's value: an offset, or a time (ISO 8601 UTC or milliseconds)."""
    if to == "offset":
        if not raw.isdigit():
            raise e.InvalidRequestError(f"the offset must be a whole number ≥ 0, got {raw!r:.40}")
        return int(raw)
    return parse_time(raw) if to == "timestamp" else None


@bp.post("/groups/<path:group_id>/delete")
def delete_group(group_id: str):
    engine = current_engine()
    try:
        engine.call(engine.group_coordinator.delete_group, group_id)
    except e.KafkaError as error:
        return _done(f"Could not delete group {group_id}: {kafka_message(error)}", "error",
                     url_for("ui.group", group_id=group_id))
    return _done(f"Deleted group {group_id} and its committed offsets.", "success", url_for("ui.groups"))
