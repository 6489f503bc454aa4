"""Kafka's principals: ``Type:name`` (``User:alice``); a connection nobody
authenticated is ``User:ANONYMOUS`` (Kafka's ``KafkaPrincipal``)."""

from __future__ import annotations

from dataclasses import dataclass

from exactly.storage.errors import InvalidRequestError

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """``Type:name`` as Kafka's ``SecurityUtils.parseKafkaPrincipal`` reads it (split
        at the first colon; both parts needed). :raise InvalidRequestError: not that shape."""
        principal_type, sep, name = (text or "").partition(":")
        if not sep or not principal_type or not name:
            raise InvalidRequestError(f"expected a principal as principalType:principalName, got {text!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
#: an ACL's principal that matches every user (Kafka's ``WILDCARD_PRINCIPAL``)
WILDCARD = KafkaPrincipal(USER_TYPE, "*")
