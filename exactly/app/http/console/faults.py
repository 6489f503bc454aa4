"""The console's faults page: the faults installed on purpose (``exactly/app/faults/``), in
the order they are tried, with how often each fired (live); a form that installs
one; Remove and Remove all. The writes are POST forms with the session's CSRF token,
as every console write; a fault that cannot work comes back as a flash saying why.
The routes join the ``ui`` blueprint.
"""

from __future__ import annotations

from flask import request, url_for

from exactly.app.faults import FaultError
from exactly.app.faults.fault import Action
from exactly.app.http import current_engine
from exactly.app.http.access import O, own
from exactly.app.http.console.blueprint import done, page, render, view
from exactly.storage.errors import error_names

#: the form's text fields and its whole-number fields, as ``Faults.add`` names them
TEXT_FIELDS = ("action", "client_id", "principal", "topic", "group", "transactional_id", "error")
NUMBER_FIELDS = ("partition", "delay_ms", "count", "seed", "duration_ms")
#: faults change what every client gets: Alter on the Cluster, as broker configs; seeing them, Describe
ALTER = own(O.ALTER)


@page("/faults", own(O.DESCRIBE))
def faults():
    return render("faults", faults=[f.describe() for f in current_engine().faults.list()],
                  actions=[a.value for a in Action], errors=error_names())


@view("/faults", ALTER, methods=("POST",))
def add_fault():
    form = request.form
    try:
        declared: dict = {name: form[name].strip() for name in TEXT_FIELDS if form.get(name, "").strip()}
        declared.update({name: _number(name, int) for name in NUMBER_FIELDS if form.get(name, "").strip()})
        if form.get("probability", "").strip():
            declared["probability"] = _number("probability", float)
        apis = [a.strip() for a in form.get("api", "").split(",") if a.strip()]
        fault = current_engine().faults.add(api=apis, **declared)
    except FaultError as error:
        return done(f"Could not install the fault: {error}", "error", url_for("ui.faults"))
    return done(f"Installed fault {fault.id}.", "success", url_for("ui.faults"))


def _number(name: str, kind: type) -> int | float:
    try:
        return kind(request.form[name].strip())
    except ValueError:
        raise FaultError(f"{name} must be a number, got {request.form[name]!r:.40}") from None


@view("/faults/<int:fault_id>/remove", ALTER, methods=("POST",))
def remove_fault(fault_id: int):
    if current_engine().faults.remove(fault_id):
        return done(f"Removed fault {fault_id}.", "success", url_for("ui.faults"))
    return done(f"Fault {fault_id} was no longer installed.", "error", url_for("ui.faults"))


@view("/faults/clear", ALTER, methods=("POST",))
def clear_faults():
    removed = current_engine().faults.clear()
    return done(f"Removed {removed} fault{'s' if removed != 1 else ''}.", "success", url_for("ui.faults"))
