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
from exactly.app.http.api import models
from exactly.app.http.api.resources import cluster_id, crn, resource
from exactly.app.http.api.transactions import TXN, api_actor, transaction_resource
from exactly.app.http.api.validation import body

bp = Blueprint("events", __name__)

SERVER = "/v3/clusters/<cluster_id>/server"


@bp.post(TXN + ":fence")
def fence(transactional_id: str):
    engine = current_engine()
    engine.call(engine.transactions.fence_producer, transactional_id, api_actor())
    return jsonify(transaction_resource(engine.call(read_models.transaction, engine, transactional_id)))


@bp.post(TXN + ":timeout")
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


@bp.get(SERVER)
def get_server():
    return jsonify(_server_resource(_server()))


@bp.post(SERVER + ":restart")
def restart():
    clean = body(models.RestartServer, required=False).clean
    server = _server()
    answer = _server_resource(server)
    server.restart_later(clean)
    return jsonify(answer), 202
