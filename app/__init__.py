"""The process: configuration, the engine that owns broker state, the ``Broker`` that
runs it with its scheduled jobs and SQLite mirror, and the faces attached to it
(the embedded client, HTTP; the Kafka listener when it arrives)."""

from app.broker import Broker

__all__ = ["Broker"]
