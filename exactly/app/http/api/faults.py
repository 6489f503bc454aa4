"""Faults over HTTP: ``/v3/clusters/<id>/faults`` (an Exactly resource; ``exactly/app/faults/``).

* ``GET .../faults`` lists the installed faults, in the order they are tried, with
  how often each fired;
* ``POST .../faults`` installs one (``models.AddFault``) -> 201 with it;
* ``POST .../faults:event`` installs an event preset's faults (``models.AddFaultEvent``:
  a coordinator away, a pause, a full disk) -> 201 with them;
* ``GET .../faults/<id>``, ``DELETE .../faults/<id>`` (204);
  ``DELETE .../faults`` removes every one (204).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, jsonify

from exactly.app.faults import Fault, FaultError
from exactly.app.http import current_engine
from exactly.app.http.api import models
from exactly.app.http.api.resources import crn, listing, resource
from exactly.app.http.api.validation import body
from exactly.storage.errors import InvalidRequestError

bp = Blueprint("faults", __name__)

FAULTS = "/v3/clusters/<cluster_id>/faults"


def fault_resource(fault: Fault) -> dict[str, Any]:
    return resource("ExactlyFault", ("faults", fault.id), crn(fault=fault.id), **fault.describe())


@bp.get(FAULTS)
def list_faults():
    return jsonify(listing("ExactlyFaultList", ("faults",),
                           [fault_resource(f) for f in current_engine().faults.list()]))


@bp.post(FAULTS)
def add_fault():
    declared = body(models.AddFault).model_dump(exclude_none=True)
    try:
        fault = current_engine().faults.add(**declared)
    except FaultError as e:
        raise InvalidRequestError(str(e)) from None
    return jsonify(fault_resource(fault)), 201


@bp.post(FAULTS + ":event")
def add_fault_event():
    event = body(models.AddFaultEvent)
    try:
        faults = current_engine().faults.event(event.event, event.duration_ms, event.coordinator)
    except FaultError as e:
        raise InvalidRequestError(str(e)) from None
    return jsonify(listing("ExactlyFaultList", ("faults",), [fault_resource(f) for f in faults])), 201


@bp.delete(FAULTS)
def clear_faults():
    current_engine().faults.clear()
    return "", 204


@bp.get(FAULTS + "/<int:fault_id>")
def get_fault(fault_id: int):
    return jsonify(fault_resource(_fault(fault_id)))


@bp.delete(FAULTS + "/<int:fault_id>")
def remove_fault(fault_id: int):
    if not current_engine().faults.remove(fault_id):
        abort(404, f"fault {fault_id} not found")
    return "", 204


def _fault(fault_id: int) -> Fault:
    fault = current_engine().faults.get(fault_id)
    if fault is None:
        abort(404, f"fault {fault_id} not found")
    return fault
