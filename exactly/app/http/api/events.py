"""Events on demand over HTTP (Exactly resources, in ``/openapi.json``): what a test of an
exactly-once application wants to happen now.

::

    POST .../transactions/<id>:fence     as a new instance's InitProducerId (epoch bump,
                                         open transaction aborted)
    POST .../transactions/<id>:timeout   as transaction.timeout.ms expiring
    GET  .../server                      ports and completed restarts
    POST .../server:restart              {"clean": false}: as a SIGKILL and a new start

The restart answers 202 before it begins (it stops this HTTP server, which waits for
the request in progress); the caller polls ``GET .../server`` until ``restarts`` grows.
Only a broker served by ``exactly.app.server.Server`` restarts (it puts itself in the app's
``extensions``; this face never imports it); another is 404.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, current_app, jsonify

from exactly.app.engine import read_models
from exactly.app.http import current_engine
from exactly.app.http.access import O, kafka, own
from exactly.app.http.api import models
from exactly.app.http.api.resources import cluster_id, crn, resource
from exactly.app.http.api.route import CLUSTER_PATH, ON_TXN, TRANSACTION_PATH, TXN_ERRORS, Route, declare
from exactly.app.http.api.transactions import api_actor, transaction_resource
from exactly.app.http.api.validation import body
from exactly.app.kafka.wire import ApiKey

bp = Blueprint("events", __name__)

SERVER = CLUSTER_PATH + "/server"
TAG = "Events"
#: timing out and restarting are the broker's own acts: an operator's, as an admin abort
AS_THE_BROKER = own(O.CLUSTER_ACTION)


@declare(bp, Route("post", TRANSACTION_PATH + ":fence", "Fence transactional producer", TAG, 200, models.Transaction,
                   TXN_ERRORS, needs=kafka(ApiKey.INIT_PRODUCER_ID, ON_TXN),  # what a new instance does to fence
                   description="Now, as a new instance's InitProducerId would: its open transaction is aborted and "
                               "the epoch bumped; the producer's next request is PRODUCER_FENCED or "
                               "INVALID_PRODUCER_EPOCH."))
def fence(transactional_id: str):
    engine = current_engine()
    engine.call(engine.transactions.fence_producer, transactional_id, api_actor())
    return jsonify(transaction_resource(engine.call(read_models.transaction, engine, transactional_id)))


@declare(bp, Route("post", TRANSACTION_PATH + ":timeout", "Time out transaction", TAG, 200, models.Transaction,
                   TXN_ERRORS, needs=AS_THE_BROKER,
                   description="Now, as transaction.timeout.ms expiring would: the open transaction is aborted with "
                               "the timeout's epoch bump (cause timeout)."))
def timeout(transactional_id: str):
    engine = current_engine()
    engine.call(engine.transactions.time_out_transaction, transactional_id, api_actor())
    return jsonify(transaction_resource(engine.call(read_models.transaction, engine, transactional_id)))


def _server() -> Any:
    server = current_app.extensions.get("exactly.server")
    if server is None:
        abort(404, "this broker is not served by a restartable server (exactly.app.server.Server)")
    return server


def _server_resource(server: Any) -> dict[str, Any]:
    return resource("ExactlyServer", ("server",), crn(server="exactly"), cluster_id=cluster_id(),
                    restarts=server.restarts, kafka_port=server.kafka_port, http_port=server.http_port)


@declare(bp, Route("get", SERVER, "Get server", TAG, 200, models.Server, needs=own(O.DESCRIBE),
                   description="The running server's ports and restarts; 404 for a broker not served by a Server."))
def get_server():
    return jsonify(_server_resource(_server()))


@declare(bp, Route("post", SERVER + ":restart", "Restart server", TAG, 202, models.Server, (404,),
                   body=models.RestartServer, body_required=False, needs=AS_THE_BROKER,
                   description="Restarts the broker in place, on the same ports, after answering: cleanly, or as a "
                               "SIGKILL would leave it. Poll Get server until restarts grows."))
def restart():
    clean = body(models.RestartServer, required=False).clean
    server = _server()
    answer = _server_resource(server)
    server.restart_later(clean)
    return jsonify(answer), 202
