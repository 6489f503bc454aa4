"""SASL on the Kafka listener: SaslHandshake (17), SaslAuthenticate (36), and the users'
credentials on the wire, DescribeUserScramCredentials (50) and AlterUserScramCredentials
(51) -- Kafka's ``SaslServerAuthenticator`` and its ``ScramControlManager``'s checks.

A connection on a SASL listener holds a :class:`SaslSession`. Until it authenticates,
only ApiVersions, SaslHandshake and SaslAuthenticate are served (anything else closes
the connection, as Kafka does). A v1 handshake is followed by SaslAuthenticate
requests; a v0 handshake by raw SASL tokens, each a size-prefixed frame without a
header, answered the same way (what Kafka still accepts from old clients). A failed
login is answered SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms``, counted, and the connection closed.

KIP-368: with ``connections.max.reauth.ms`` set, SaslAuthenticate v1+ tells the client
its session lifetime; the client re-authenticates on the same connection (a new
SaslHandshake, as the same principal) before it ends, and a connection past it that
has not is closed at its next request.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import TYPE_CHECKING, Any

from exactly.app.kafka import authorization
from exactly.app.kafka.api import ApiKey, RequestContext, error_code, serves
from exactly.app.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from exactly.app.security.principal import USER_TYPE, KafkaPrincipal
from exactly.app.security.sasl_plain import PLAIN, parse_plain
from exactly.app.security.scram import ScramExchange, ScramMechanism, credential_from_salted_password
from exactly.coordinator.cluster_metadata import MAX_SCRAM_NAME_BYTES, ScramCredentialRecord
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    IllegalSaslStateError,
    KafkaError,
    ResourceNotFoundError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

if TYPE_CHECKING:
    from exactly.app.engine import Engine

log = logging.getLogger(__name__)


class SaslState(enum.Enum):
    """Where a SASL connection is in its authentication."""

    #: nothing yet: ApiVersions and SaslHandshake only
    HANDSHAKE = "awaiting SaslHandshake"
    #: a v1 handshake chose a mechanism: SaslAuthenticate requests carry the exchange
    AUTHENTICATING = "authenticating"
    #: a v0 handshake chose a mechanism: raw SASL tokens carry the exchange
    RAW_TOKENS = "authenticating with raw tokens"
    #: every API is served (a new SaslHandshake re-authenticates)
    AUTHENTICATED = "authenticated"
    #: a failed login or an illegal request: the connection closes
    FAILED = "failed"


#: each state and the states it may be entered from
ALLOWED_PREVIOUS: dict[SaslState, frozenset[SaslState]] = {
    SaslState.HANDSHAKE: frozenset(),
    SaslState.AUTHENTICATING: frozenset({SaslState.HANDSHAKE, SaslState.AUTHENTICATED}),
    SaslState.RAW_TOKENS: frozenset({SaslState.HANDSHAKE}),
    SaslState.AUTHENTICATED: frozenset({SaslState.AUTHENTICATING, SaslState.RAW_TOKENS}),
    SaslState.FAILED: frozenset({SaslState.HANDSHAKE, SaslState.AUTHENTICATING, SaslState.RAW_TOKENS,
                                 SaslState.AUTHENTICATED}),
}
#: the APIs served in each state (AUTHENTICATED: all of them)
SERVED: dict[SaslState, frozenset[int]] = {
    SaslState.HANDSHAKE: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    SaslState.AUTHENTICATING: frozenset({ApiKey.SASL_AUTHENTICATE}),
    SaslState.RAW_TOKENS: frozenset(),
    SaslState.FAILED: frozenset(),
}
#: the requests whose outcome decides how the connection's next frame is read
SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class SaslSession:
    """One connection's SASL authentication (Kafka's ``SaslServerAuthenticator``)."""

    def __init__(self, engine: "Engine", mechanisms: tuple[str, ...]) -> None:
        self.engine = engine
        self.mechanisms = mechanisms
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self._scram: ScramExchange | None = None
        #: the user name a PLAIN token named (for a failure's record)
        self._attempted: str | None = None
        #: who authenticated (kept through a re-authentication, which must name the same)
        self.principal: KafkaPrincipal | None = None
        #: time.monotonic() when the session ends (KIP-368); None: never
        self.expires_at: float | None = None

    def transition(self, state: SaslState) -> None:
        """:raise IllegalSaslStateError: ``state`` may not follow the current one."""
        if self.state not in ALLOWED_PREVIOUS[state]:
            raise IllegalSaslStateError(f"SASL state {state.value} cannot follow {self.state.value}")
        self.state = state

    def refusal(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be served now (the connection closes), or None."""
        if self.state is SaslState.AUTHENTICATED:
            if self.expires_at is not None and time.monotonic() >= self.expires_at and (
                    api_key != ApiKey.SASL_HANDSHAKE):
                return "its SASL session expired and it has not re-authenticated (connections.max.reauth.ms)"
            return None
        if api_key in SERVED[self.state]:
            return None
        return f"{ApiKey(api_key).name} is not served before SASL authentication (state: {self.state.value})"

    def handshake(self, mechanism: str, raw_tokens: bool) -> None:
        """Choose the mechanism. :raise UnsupportedSaslMechanismError: not enabled (the
        connection then closes). :raise IllegalSaslStateError: out of order."""
        if mechanism not in self.mechanisms:
            raise UnsupportedSaslMechanismError(
                f"Unsupported SASL mechanism {mechanism}; enabled: {', '.join(self.mechanisms)}")
        if self.state is SaslState.AUTHENTICATED and (raw_tokens or mechanism != self.mechanism):
            raise IllegalSaslStateError(f"re-authentication needs SaslHandshake v1 and the same mechanism "
                                        f"({self.mechanism})")
        self.transition(SaslState.RAW_TOKENS if raw_tokens else SaslState.AUTHENTICATING)
        self.mechanism = mechanism
        self._scram = None if mechanism == PLAIN else ScramExchange(
            ScramMechanism.of(mechanism), self.engine.access.scram_credentials.get)

    async def step(self, token: bytes) -> tuple[bytes, KafkaPrincipal | None]:
        """The answer to the client's next token, and who authenticated once the exchange
        is complete (None before). :raise SaslAuthenticationFailedError: the login failed."""
        if self._scram is not None:
            answer = self._scram.step(token)
            user = self._scram.user
        else:
            user, password = parse_plain(token)
            self._attempted = user
            if await self.engine.access.check_password(user, password) is None:
                raise SaslAuthenticationFailedError("Authentication failed: Invalid username or password")
            answer = b""
        if user is None:
            return answer, None
        principal = KafkaPrincipal(USER_TYPE, user)
        if self.principal is not None and principal != self.principal:
            raise SaslAuthenticationFailedError(
                f"Cannot change principals during re-authentication from {self.principal}: {principal}")
        self.principal = principal
        self.transition(SaslState.AUTHENTICATED)
        reauth_ms = self.engine.config.connections_max_reauth_ms
        self.expires_at = time.monotonic() + reauth_ms / 1000 if reauth_ms else None
        return answer, principal

    async def fail(self, error: SaslAuthenticationFailedError, client: object) -> None:
        """Mark the connection for closing and apply the login policy of every face
        (``Access.login_failed``: counted with the principal, answered after
        ``connection.failed.authentication.delay.ms``)."""
        log.info("kafka: failed authentication of %s with %s: %s", client, self.mechanism, error)
        self.transition(SaslState.FAILED)
        attempted = self._scram.attempted if self._scram is not None else self._attempted
        await self.engine.access.login_failed("kafka", self.mechanism or "unknown", attempted)


def _session(ctx: RequestContext) -> SaslSession:
    """:raise IllegalSaslStateError: the connection is not on a SASL listener (Kafka's
    answer to a SaslHandshake on a PLAINTEXT or SSL listener)."""
    session = ctx.connection.sasl
    if session is None:
        raise IllegalSaslStateError("SASL is not enabled on this listener")
    return session


@serves(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, request: Any) -> dict:
    session = _session(ctx)
    try:
        session.handshake(request.mechanism, raw_tokens=ctx.version == 0)
    except KafkaError as e:  # Kafka closes the connection after this answer
        log.info("kafka: closing %s after its SaslHandshake: %s", ctx.connection, e)
        session.transition(SaslState.FAILED)
        return {"error_code": error_code(e), "mechanisms": list(session.mechanisms)}
    return {"error_code": 0, "mechanisms": list(session.mechanisms)}


@serves(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> dict:
    session = _session(ctx)
    if session.state is not SaslState.AUTHENTICATING:
        e: KafkaError = IllegalSaslStateError(f"SaslAuthenticate is not expected in state {session.state.value}")
        session.transition(SaslState.FAILED)
        return {"error_code": e.code, "error_message": str(e), "auth_bytes": b""}
    try:
        answer, principal = await session.step(bytes(request.auth_bytes))
    except SaslAuthenticationFailedError as e:
        await session.fail(e, ctx.connection)
        return {"error_code": e.code, "error_message": str(e), "auth_bytes": b""}
    lifetime_ms = 0
    if principal is not None:
        ctx.connection.principal = principal
        lifetime_ms = ctx.engine.config.connections_max_reauth_ms
    return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime": lifetime_ms}


async def raw_token(session: SaslSession, token: bytes, client: Any) -> bytes | None:
    """The answer to a raw SASL token (after a v0 handshake); None when the login
    failed (after the delay) and the connection must close."""
    try:
        answer, principal = await session.step(token)
    except SaslAuthenticationFailedError as e:
        await session.fail(e, client)
        return None
    if principal is not None:
        client.principal = principal
    return answer


# -- users: DescribeUserScramCredentials, AlterUserScramCredentials ---------------------------


def _result(user: str, error: KafkaError | None) -> dict:
    return {"user": user, "error_code": error_code(error), "error_message": None if error is None else str(error)}


@serves(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> dict:
    if not authorization.allowed(ctx, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ResourceType.CLUSTER, CLUSTER_NAME):  # also per user, as Kafka's getErrorResponse
        e = ClusterAuthorizationFailedError("Cluster authorization failed (DESCRIBE on the cluster)")
        return {"error_code": e.code, "error_message": str(e),
                "results": [{**_result(u.name, e), "credential_infos": []} for u in request.users or ()]}
    credentials = ctx.engine.access.scram_credentials
    names = [u.name for u in request.users or ()] or credentials.users()
    results = []
    for user in dict.fromkeys(names):
        found = credentials.of_user(user)
        error: KafkaError | None = None
        if names.count(user) > 1:
            error = DuplicateResourceError(f"Cannot describe SCRAM credentials for the same user twice in a "
                                           f"single request: {user}")
        elif not found:
            error = ResourceNotFoundError(f"Attempt to describe a user credential that does not exist: {user}")
        results.append({**_result(user, error), "credential_infos": [] if error else [
            {"mechanism": c.mechanism, "iterations": c.iterations} for c in found]})
    return {"error_code": 0, "error_message": None, "results": results}


def _alteration_error(ctx: RequestContext, user: str, mechanism: int, iterations: int | None) -> KafkaError | None:
    """Why Kafka refuses one deletion (``iterations`` None) or upsertion, or None."""
    if not user:
        return UnacceptableCredentialError("Username must not be empty")
    if len(user.encode("utf-8")) > MAX_SCRAM_NAME_BYTES:
        return UnacceptableCredentialError(f"Username is {len(user.encode('utf-8'))} bytes long: at most "
                                           f"{MAX_SCRAM_NAME_BYTES} (the key of its credential record)")
    if mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        return UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    if iterations is None and ctx.engine.access.scram_credentials.get(user, ScramMechanism(mechanism)) is None:
        return ResourceNotFoundError("Attempt to delete a user credential that does not exist")
    return None


def _upsertion(u: Any) -> ScramCredentialRecord:
    return credential_from_salted_password(u.name, ScramMechanism(u.mechanism), bytes(u.salt),
                                           bytes(u.salted_password), u.iterations)


@serves(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> dict:
    """Kafka's rules (its ``ScramControlManager``): a user named twice in one request,
    whatever the mechanisms, is DUPLICATE_RESOURCE and none of its alterations applies;
    a user's first refusal stands; the rest apply together."""
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    if not authorization.allowed(ctx, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ResourceType.CLUSTER, CLUSTER_NAME):
        e = ClusterAuthorizationFailedError("Cluster authorization failed (ALTER on the cluster)")
        return {"results": [_result(user, e) for user in users]}
    errors: dict[str, KafkaError] = {}
    deletions: dict[str, ScramMechanism] = {}
    upsertions: dict[str, ScramCredentialRecord] = {}
    for alteration in [*request.deletions, *request.upsertions]:
        user, upsert = alteration.name, hasattr(alteration, "iterations")
        if user in errors:
            continue
        if deletions.pop(user, None) is not None or upsertions.pop(user, None) is not None:
            errors[user] = DuplicateResourceError("A user credential cannot be altered twice in the same request")
            continue
        error = _alteration_error(ctx, user, alteration.mechanism, alteration.iterations if upsert else None)
        try:
            if error is None and upsert:
                upsertions[user] = _upsertion(alteration)
            elif error is None:
                deletions[user] = ScramMechanism(alteration.mechanism)
        except KafkaError as e:
            error = e
        if error is not None:
            errors[user] = error
    try:
        await ctx.engine.access.alter_scram_credentials(list(deletions.items()), list(upsertions.values()))
    except KafkaError as e:
        errors.update({user: e for user in users if user not in errors})
    return {"results": [_result(user, errors.get(user)) for user in users]}
