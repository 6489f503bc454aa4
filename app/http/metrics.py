"""``/metrics`` in Prometheus' text format (prometheus-client)."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    registry = CollectorRegistry()
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
