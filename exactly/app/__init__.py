"""The process: configuration, the engine that owns broker state, the ``Broker`` that
runs it with its scheduled jobs and SQLite mirror, and the faces attached to it
(the embedded client, HTTP, the Kafka listener).

``Broker`` is imported on first use: a process that needs only a face that talks to a
broker over the network (a Spark worker running ``exactly.app.spark``) does not load the
engine, SQLAlchemy and Alembic.
"""

from typing import Any

__all__ = ["Broker"]


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from exactly.app.broker import Broker
        return Broker
    raise AttributeError(f"module 'exactly.app' has no attribute {name!r}")
