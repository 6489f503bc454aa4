"""The users' SCRAM credentials as the broker holds them: by (user, mechanism), read
back from ``__cluster_metadata`` at start and changed only after the change is
durable (the engine does both; ``exactly/coordinator/cluster_metadata.py`` has the records).
Touched only on the engine's loop."""

from __future__ import annotations

from typing import Iterable

from exactly.app.security.scram import SCRAM_MECHANISMS, ScramMechanism
from exactly.coordinator.cluster_metadata import ScramCredentialRecord


class ScramCredentials:
    """Every user's credential per SCRAM mechanism (Kafka's ``CredentialCache``)."""

    def __init__(self, records: Iterable[ScramCredentialRecord] = ()) -> None:
        self._credentials: dict[tuple[str, ScramMechanism], ScramCredentialRecord] = {}
        for record in records:
            self.put(record)

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredentialRecord | None:
        return self._credentials.get((user, mechanism))

    def put(self, record: ScramCredentialRecord) -> None:
        self._credentials[record.name, ScramMechanism(record.mechanism)] = record

    def remove(self, user: str, mechanism: ScramMechanism) -> None:
        self._credentials.pop((user, mechanism), None)

    def of_user(self, user: str) -> list[ScramCredentialRecord]:
        """The user's credentials, SCRAM-SHA-256 first; empty for an unknown user."""
        return [c for m in SCRAM_MECHANISMS
                if (c := self._credentials.get((user, m))) is not None]

    def users(self) -> list[str]:
        """Every user with a credential, sorted."""
        return sorted({user for user, _ in self._credentials})
