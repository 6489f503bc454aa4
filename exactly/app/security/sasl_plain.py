"""SASL PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` reads it: one message
``authzid NUL authcid NUL passwd``, the authorization id empty or the user's own."""

from __future__ import annotations

from exactly.storage.errors import SaslAuthenticationFailedError

#: the mechanism's SASL name
PLAIN = "PLAIN"


def parse_plain(token: bytes) -> tuple[str, str]:
    """``(user, password)`` of a PLAIN message.
    :raise SaslAuthenticationFailedError: not that shape (Kafka's messages)."""
    try:
        parts = token.decode("utf-8").split("\u0000")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError("Invalid SASL/PLAIN response: not UTF-8") from None
    if len(parts) != 3:
        raise SaslAuthenticationFailedError("Invalid SASL/PLAIN response: expected 3 tokens, got "
                                            f"{len(parts)}")
    authorization_id, user, password = parts
    if not user:
        raise SaslAuthenticationFailedError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationFailedError("Authentication failed: password not specified")
    if authorization_id and authorization_id != user:
        raise SaslAuthenticationFailedError(
            "Authentication failed: Client requested an authorization id that is different from username")
    return user, password
