"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: credentials and the server's side of
an exchange, through the ``scramp`` library (no crypto of our own).

A credential is what Kafka's ``ScramCredential`` holds -- salt, StoredKey, ServerKey,
iteration count -- never the password: SCRAM logins check a client's proof against
StoredKey, and PLAIN logins derive the keys from the offered password with the stored
salt and iterations and compare StoredKey in constant time (:func:`password_matches`).
"""

from __future__ import annotations

import enum
import hmac
import secrets
from typing import Callable

import scramp

from exactly.coordinator.cluster_metadata import ScramCredentialRecord
from exactly.storage.errors import SaslAuthenticationFailedError, UnacceptableCredentialError

#: Kafka's bounds of a credential's iteration count (``ScramMechanism.minIterations``, and
#: the most AlterUserScramCredentials accepts)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramMechanism(enum.IntEnum):
    """Kafka's ``ScramMechanism`` wire codes (DescribeUserScramCredentials and the
    UserScramCredentialRecord)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name: ``SCRAM-SHA-256``."""
        return self.name.replace("_", "-")

    @classmethod
    def of(cls, mechanism_name: str) -> "ScramMechanism":
        """The mechanism of a SASL name; UNKNOWN for one that is not SCRAM's."""
        return next((m for m in cls if m.mechanism_name == mechanism_name and m is not cls.UNKNOWN), cls.UNKNOWN)


#: the mechanisms a user may have a credential of, in the order they are checked
SCRAM_MECHANISMS = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)


def new_credential(user: str, mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredentialRecord:
    """A salted credential for ``password`` (a random salt unless one is given).
    :raise UnacceptableCredentialError: empty user or password, iterations out of range."""
    if not user or not password:
        raise UnacceptableCredentialError("a SCRAM credential needs a user name and a password")
    check_iterations(iterations)
    salt, stored_key, server_key, _ = scramp.ScramMechanism(mechanism.mechanism_name).make_auth_info(
        password, iteration_count=iterations, salt=salt)
    return ScramCredentialRecord(user, int(mechanism), salt, stored_key, server_key, iterations)


def credential_from_salted_password(user: str, mechanism: ScramMechanism, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredentialRecord:
    """The credential of an AlterUserScramCredentials upsertion, which carries the
    salted password (the client ran PBKDF2), as Kafka's ``ScramFormatter`` derives it.
    :raise UnacceptableCredentialError: empty user, salt or salted password, iterations out of range."""
    if not user or not salt or not salted_password:
        raise UnacceptableCredentialError("a SCRAM credential needs a user name, a salt and a salted password")
    check_iterations(iterations)
    hash_function = scramp.ScramMechanism(mechanism.mechanism_name).hf
    _, stored_key, server_key = scramp.core._c_key_stored_key_s_key(hash_function, salted_password)
    return ScramCredentialRecord(user, int(mechanism), salt, stored_key, server_key, iterations)


def check_iterations(iterations: int) -> None:
    """:raise UnacceptableCredentialError: outside [4096, 16384], as Kafka refuses."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")


def password_matches(credential: ScramCredentialRecord, password: str) -> bool:
    """Whether ``password`` derives ``credential``'s StoredKey (PBKDF2 with its salt and
    iterations: CPU-heavy, keep it off the event loop)."""
    if not password:
        return False
    derived = new_credential(credential.name, ScramMechanism(credential.mechanism), password,
                             credential.iterations, credential.salt)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


#: this process's secret for the made-up credentials of unknown users (the same fake salt
#: for one name on every attempt, unpredictable to clients)
_FAKE_SECRET = secrets.token_bytes(32)


def dummy_credential(mechanism: ScramMechanism) -> ScramCredentialRecord:
    """A credential of ``mechanism`` no password matches, with the default iterations:
    what a password check derives against where the user has none of that mechanism,
    so that it takes as long for an unknown user as for a known one."""
    return new_credential("\u0000unknown", mechanism, secrets.token_urlsafe(24), MIN_ITERATIONS)


#: how a SCRAM exchange finds a user's credential for its mechanism (None: no such user)
CredentialLookup = Callable[[str, ScramMechanism], "ScramCredentialRecord | None"]


class ScramExchange:
    """The server's side of one SCRAM exchange: client-first -> server-first,
    client-final -> server-final. Anything out of order, malformed, for an unknown
    user or with a wrong proof is SASL_AUTHENTICATION_FAILED (one message for all, as
    Kafka's, so a client cannot tell a missing user from a wrong password)."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server = scramp.ScramMechanism(mechanism.mechanism_name).make_server(self._auth_info)
        self._first_done = False
        #: the authenticated user, once the exchange is complete
        self.user: str | None = None
        #: the user name the client-first message claimed (known or not), for the failure's record
        self.attempted: str | None = None
        self._claimed: str | None = None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        """The user's credential; for an unknown user a made-up one (RFC 5802 §9: the
        exchange goes on and fails at the proof, so a client cannot tell a missing user
        from a wrong password by the server-first message or the time)."""
        name = username  # scramp has undone RFC 5802's saslname escapes
        self.attempted = name
        credential = self._lookup(name, self.mechanism)
        if credential is None:
            fake = hmac.new(_FAKE_SECRET, f"{self.mechanism.mechanism_name}:{name}".encode(), "sha256").digest()
            return fake, fake, fake, MIN_ITERATIONS  # the proof is refused before the keys matter
        self._claimed = name
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, token: bytes) -> bytes:
        """The server's answer to the client's next message.
        :raise SaslAuthenticationFailedError: the exchange failed."""
        try:
            message = token.decode("utf-8")
            if not self._first_done:
                self._first_done = True
                self._server.set_client_first(message)
                return self._server.get_server_first().encode()
            if self.user is not None:
                raise scramp.ScramException("the exchange is already complete")
            self._accept_doubled_client_nonce(message)
            if self._claimed is None:
                raise scramp.ScramException(f"unknown user {self.attempted!r}")
            self._server.set_client_final(message)
            answer = self._server.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError) as e:
            raise SaslAuthenticationFailedError(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{self.mechanism.mechanism_name}") from e
        self.user = self._claimed
        return answer

    def _accept_doubled_client_nonce(self, client_final: str) -> None:
        """librdkafka before 2.6.1 (kcat in Debian 12 and Ubuntu 24.04 among them) sends
        the client nonce twice in client-final (``r=<client nonce><client nonce><server
        nonce>``; librdkafka#4895). Kafka 3.8.1 to 3.9 accept it, and so does this broker:
        the server's nonce is still in it, so a replayed message fails all the same, and
        the proof covers the message as sent. Nothing else differs from RFC 5802."""
        nonce = str(self._server.nonce)
        sent = next((part[2:] for part in client_final.split(",") if part.startswith("r=")), "")
        doubled = sent[:-len(nonce)] if sent.endswith(nonce) else ""
        if doubled and nonce.startswith(doubled):
            self._server.nonce = scramp.core.Nonce(sent)

    @property
    def complete(self) -> bool:
        return self.user is not None
