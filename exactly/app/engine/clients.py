"""The Kafka clients connected now, as the engine's read models and its kill see them.

The Kafka face owns its connections (``exactly/app/kafka/server.py``: each listener
its own); it tells this registry when one opens and ends, so the console's Clients
page, ``/metrics`` and the transaction pages can say who is connected without the
engine knowing the Kafka face, and a killed broker drops every connection at once,
as a dead process's sockets are.
"""

from __future__ import annotations

from typing import Iterator, Protocol


class ConnectedClient(Protocol):
    """What a connection tells about its client (Kafka's names: client id, KIP-511's
    software name and version, the transactional id and producer id it last used) and
    who it authenticated as (its ``KafkaPrincipal``: ``str()`` gives ``User:alice``)."""

    client_id: str | None
    software_name: str
    software_version: str
    address: str
    host: str
    since_ms: int
    requests: int
    last_request_ms: int
    transactional_id: str | None
    producer_id: int

    @property
    def principal(self) -> object:
        """Who it authenticated as (read only here: its ``str()`` is what is shown)."""

    def reset(self) -> None:
        """Drop the connection at once, unanswered."""


class ConnectedClients:
    """The open connections of every Kafka listener; used on the engine's loop only."""

    def __init__(self) -> None:
        self._open: set[ConnectedClient] = set()

    def opened(self, client: ConnectedClient) -> None:
        self._open.add(client)

    def ended(self, client: ConnectedClient) -> None:
        self._open.discard(client)

    def __iter__(self) -> Iterator[ConnectedClient]:
        return iter(list(self._open))

    def __len__(self) -> int:
        return len(self._open)

    def reset_all(self) -> None:
        """A kill: every connection dropped unanswered."""
        for client in self:
            client.reset()
