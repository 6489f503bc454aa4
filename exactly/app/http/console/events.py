"""The console's events on demand, on a transaction's page: Fence producer (as a new
instance's InitProducerId would) and Time out now (as ``transaction.timeout.ms``
expiring would) -- ``exactly/app/http/api/events.py``'s operations, as POST forms with the session's
CSRF token, confirmed in the browser like the Abort button. The routes join the ``ui``
blueprint.
"""

from __future__ import annotations

from flask import url_for

from exactly.app.http import current_engine
from exactly.app.http.access import O, kafka, own
from exactly.app.http.console.blueprint import ON_TXN, actor, back, done, view
from exactly.app.kafka.wire import ApiKey
from exactly.storage import errors as e


@view("/transactions/<path:txn_id>/fence", kafka(ApiKey.INIT_PRODUCER_ID, ON_TXN), methods=("POST",))
def fence_transaction(txn_id: str):
    target = back(url_for("ui.transaction", txn_id=txn_id))
    engine = current_engine()
    try:
        producer_id, epoch = engine.call(engine.transactions.fence_producer, txn_id, actor())
    except e.KafkaError as error:
        return done(f"Could not fence {txn_id}: {error.name} — {error}", "error", target)
    return done(f"Fenced {txn_id}: producer {producer_id} is at epoch {epoch} now; the running producer's next "
                f"request is refused (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH).", "success", target)


@view("/transactions/<path:txn_id>/timeout", own(O.CLUSTER_ACTION), methods=("POST",))  # the broker's own act
def time_out_transaction(txn_id: str):
    target = back(url_for("ui.transaction", txn_id=txn_id))
    engine = current_engine()
    try:
        engine.call(engine.transactions.time_out_transaction, txn_id, actor())
    except e.KafkaError as error:
        return done(f"Could not time out {txn_id}: {error.name} — {error}", "error", target)
    return done(f"Timed out {txn_id}: its transaction is aborted as transaction.timeout.ms would have, and its "
                f"producer's epoch bumped.", "success", target)
