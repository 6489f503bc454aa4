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
from exactly.app.http.access import O, own
from exactly.app.http.api import models
from exactly.app.http.api.resources import crn, listing, resource
from exactly.app.http.api.route import CLUSTER_PATH, Route, declare
from exactly.app.http.api.validation import body
from exactly.storage.errors import InvalidRequestError

bp = Blueprint("faults", __name__)

FAULTS = CLUSTER_PATH + "/faults"
TAG = "Faults"
#: faults change what every client gets: Alter on the Cluster, as broker configs; seeing them, Describe
DESCRIBE, ALTER = own(O.DESCRIBE), own(O.ALTER)


def fault_resource(fault: Fault) -> dict[str, Any]:
    return resource("ExactlyFault", ("faults", fault.id), crn(fault=fault.id), **fault.describe())


@declare(bp, Route("get", FAULTS, "List faults", TAG, 200, models.listing(models.Fault), needs=DESCRIBE,
                   description="The faults installed on purpose, in the order they are tried (the first that matches "
                               "a request acts on it), with how often each fired."))
def list_faults():
    return jsonify(listing("ExactlyFaultList", ("faults",),
                           [fault_resource(f) for f in current_engine().faults.list()]))


@declare(bp, Route("post", FAULTS, "Add fault", TAG, 201, models.Fault, (400, 404), body=models.AddFault,
                   needs=ALTER,
                   description="Install a fault after the others: matching Kafka requests get an error (per "
                               "partition), a delay, a closed connection before or after the work, or no answer."))
def add_fault():
    declared = body(models.AddFault).model_dump(exclude_none=True)
    try:
        fault = current_engine().faults.add(**declared)
    except FaultError as e:
        raise InvalidRequestError(str(e)) from None
    return jsonify(fault_resource(fault)), 201


@declare(bp, Route("post", FAULTS + ":event", "Add fault event", TAG, 201, models.listing(models.Fault), (400, 404),
                   body=models.AddFaultEvent, needs=ALTER,
                   description="Install an event preset's faults: a coordinator unavailable, loading or moved; a "
                               "pause of every answer; a full disk."))
def add_fault_event():
    event = body(models.AddFaultEvent)
    try:
        faults = current_engine().faults.event(event.event, event.duration_ms, event.coordinator)
    except FaultError as e:
        raise InvalidRequestError(str(e)) from None
    return jsonify(listing("ExactlyFaultList", ("faults",), [fault_resource(f) for f in faults])), 201


@declare(bp, Route("delete", FAULTS, "Remove every fault", TAG, 204, None, needs=ALTER))
def clear_faults():
    current_engine().faults.clear()
    return "", 204


@declare(bp, Route("get", FAULTS + "/{fault_id}", "Get fault", TAG, 200, models.Fault, needs=DESCRIBE))
def get_fault(fault_id: int):
    return jsonify(fault_resource(_fault(fault_id)))


@declare(bp, Route("delete", FAULTS + "/{fault_id}", "Remove fault", TAG, 204, None, needs=ALTER))
def remove_fault(fault_id: int):
    if not current_engine().faults.remove(fault_id):
        abort(404, f"fault {fault_id} not found")
    return "", 204


def _fault(fault_id: int) -> Fault:
    fault = current_engine().faults.get(fault_id)
    if fault is None:
        abort(404, f"fault {fault_id} not found")
    return fault
