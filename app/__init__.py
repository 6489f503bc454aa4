"""The process: configuration, the engine that owns broker state, and its faces
(embedded ``Broker`` now; HTTP, Kafka listener and scheduled jobs as they arrive)."""

from app.broker import Broker

__all__ = ["Broker"]
