"""Access: who may do what (the authorizer over the ACLs), who is who (the users' SCRAM
credentials), and what each principal may still take (its producer ids, its open
transactions, its rate of new producer ids) -- Kafka's ``Authorizer``,
``CredentialCache`` and quota managers, as one service of the engine.

ACLs and credentials are durable in ``__cluster_metadata``
(``exactly/coordinator/cluster_metadata.py``): a change is written there first and applies
only once written. Everything here runs on the engine's loop, but
:meth:`Access.authenticate_password`, which HTTP threads call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Awaitable, Callable, Iterator

from exactly.app.config import BrokerConfig
from exactly.app.engine.counters import EngineCounters
from exactly.app.engine.loop_bridge import LoopBridge
from exactly.app.engine.principals import DenialLog, OpenTransactions, ProducerIdRate, ProducerOwners
from exactly.app.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclBinding, AclBindingFilter, AclOperation, ResourceType
from exactly.app.security.authorizer import Decision, Reason, StandardAuthorizer
from exactly.app.security.credentials import ScramCredentials
from exactly.app.security.principal import USER_TYPE, KafkaPrincipal
from exactly.app.security.scram import SCRAM_MECHANISMS, ScramMechanism, dummy_credential, password_matches
from exactly.coordinator import cluster_metadata
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    SecurityDisabledError,
    ThrottlingQuotaExceededError,
    TransactionalIdAuthorizationFailedError,
)

log = logging.getLogger(__name__)

#: topics no client may do anything with, whatever the ACLs, super users and
#: ``allow.everyone.if.no.acl.found`` say, with or without an authorizer:
#: ``__cluster_metadata`` holds every user's salt, iterations, StoredKey and ServerKey
#: (enough to check passwords offline), and Kafka's metadata log is no topic to clients
NEVER_SERVED_TOPICS = frozenset({cluster_metadata.TOPIC})


def never_served(resource_type: ResourceType, name: str) -> bool:
    """Whether the resource is one no client may touch (:data:`NEVER_SERVED_TOPICS`)."""
    return resource_type is ResourceType.TOPIC and name in NEVER_SERVED_TOPICS


#: PBKDF2 derivations of password checks (PLAIN, HTTP Basic, the console) running at once
PASSWORD_DERIVATIONS_AT_ONCE = 1

#: the principal label of a failed login whose user does not exist
UNKNOWN_PRINCIPAL = "unknown"

#: appends key/value records (None: a tombstone) to ``__cluster_metadata``, durably
MetadataWriter = Callable[[list[tuple[bytes, bytes | None]]], Awaitable[None]]


class Access:
    """The authorizer, the credentials and the per-principal limits."""

    def __init__(self, config: BrokerConfig, counters: EngineCounters, bridge: LoopBridge,
                 write_metadata: MetadataWriter, transaction_open: Callable[[str], bool]) -> None:
        self._counters = counters
        self._bridge = bridge
        self._write_metadata = write_metadata
        #: the ACLs and Kafka's rules over them; None: no authorizer (authorizer.class.name)
        self._authorizer = config.authorizer()
        #: one ACL change at a time, so a binding is never written twice
        self._acl_changes = asyncio.Lock()
        #: the users' SCRAM credentials (SASL logins, HTTP Basic), whether or not ACLs are on
        self.scram_credentials = ScramCredentials()
        #: per principal (exactly/app/engine/principals.py): denials, producer ids, abuse limits
        self._denials = DenialLog()
        self._producer_owners = ProducerOwners()
        self._producer_id_rate = ProducerIdRate(config.exactly_producer_id_rate_per_principal)
        self._open_transactions = OpenTransactions(config.exactly_max_open_transactions_per_principal,
                                                   transaction_open)
        #: what a password check derives against for a mechanism the user has no
        #: credential of (:meth:`check_password`)
        self._dummy_credentials = {m: dummy_credential(m) for m in SCRAM_MECHANISMS}
        self._failed_login_delay_s = config.connection_failed_authentication_delay_ms / 1000
        self._derivations = asyncio.Semaphore(PASSWORD_DERIVATIONS_AT_ONCE)

    def load(self, image: cluster_metadata.MetadataImage) -> None:
        """Install what ``__cluster_metadata`` holds (before the loop runs)."""
        for credential in image.scram_credentials.values():
            self.scram_credentials.put(credential)
        for producer_id, principal in image.producer_owners.items():
            self._producer_owners.bind(producer_id, principal)
        if self._authorizer is not None:
            for acl_id, acl in image.acls.items():
                self._authorizer.add_acl(acl_id, AclBinding.from_record(acl))

    # -- authorization ----------------------------------------------------------------------

    @property
    def authorizer_enabled(self) -> bool:
        return self._authorizer is not None

    def authorize(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, surface: str = "kafka", audit: bool = True) -> bool:
        """May ``principal`` from ``host`` do ``operation`` on the resource? Always yes
        with no authorizer configured (``exactly/app/security/authorizer.py`` has the rules). A
        denial is counted and logged (rate-limited) with the ``surface`` that asked
        (``kafka``, ``http``), unless ``audit`` is false: a check that only filters what
        is listed (Metadata of all topics, ListGroups), as Kafka's ``logIfDenied=false``.
        A topic of :data:`NEVER_SERVED_TOPICS` is refused to everyone, first."""
        if never_served(resource_type, name):
            pass
        elif self._authorizer is None or self._authorizer.authorize(principal, host, operation, resource_type, name):
            return True
        if audit:
            self.authorization_denied(principal, host, operation, resource_type, name, surface)
        return False

    def authorize_any(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on at least one resource of the type (Kafka's
        ``authorizeByResourceType``: an idempotent producer's Write on any topic)? Not audited."""
        return self._authorizer is None or self._authorizer.authorize_by_resource_type(
            principal, host, operation, resource_type)

    def authorization_denied(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                             resource_type: ResourceType, name: str, surface: str = "kafka") -> None:
        """Count a denial (``exactly_authorization_denials_total``) and log it once."""
        self._counters.authorization_denied(resource_type.name, operation.name)
        self._denials.denied(surface, str(principal), host, operation.name, resource_type.name, name)

    def authorized_operations(self, principal: KafkaPrincipal | str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[AclOperation]:
        """What the principal may do on the resource, of what its type supports (for
        Metadata's and DescribeGroups' ``authorized_operations``): everything it supports
        with no authorizer configured, as Kafka's ``AuthHelper.authorizedOperations``."""
        if never_served(resource_type, name):
            return frozenset()
        if self._authorizer is None:
            return SUPPORTED_OPERATIONS.get(resource_type, frozenset())
        return self._authorizer.authorized_operations(principal, host, resource_type, name)

    def explain(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> Decision:
        """:meth:`authorize`'s answer and what decided it (the console's "who may do what")."""
        if never_served(resource_type, name):
            return Decision(False, Reason.NEVER_SERVED)
        if self._authorizer is None:
            return Decision(True, Reason.NO_AUTHORIZER)
        return self._authorizer.explain(principal, host, operation, resource_type, name)

    # -- producer ids and transactions per principal ---------------------------------------------

    async def bind_producer(self, producer_id: int, principal: KafkaPrincipal | None) -> None:
        """``producer_id`` is handed to ``principal`` (InitProducerId, keepPreparedTxn):
        from now on it writes under it, and nobody else (:meth:`check_producer_owner`),
        across restarts too -- the binding is durable in ``__cluster_metadata`` before
        the caller answers (the bindings forgotten to make room are tombstoned with it).
        Kafka binds no producer id to a principal: its idempotent producers' ids can be
        taken over by any writer of the topic, which is what this closes.
        :raise KafkaError: the write failed; the id is not handed out."""
        if principal is None or self._authorizer is None:
            return
        owner = str(principal)
        if self._producer_owners.owner(producer_id) == owner:
            return
        forgotten = self._producer_owners.bind(producer_id, owner)
        await self._write_metadata(
            [(cluster_metadata.encode_owner_key(producer_id), cluster_metadata.encode_owner_value(producer_id, owner))]
            + [(cluster_metadata.encode_owner_key(old), None) for old in forgotten])

    def may_see_producer(self, principal: KafkaPrincipal | str, host: str, producer_id: int,
                         transactional_id: str | None) -> bool:
        """Whether DescribeProducers (any face) shows ``principal`` this producer's state:
        Kafka shows every producer to whoever may Read the topic, and so does this for a
        transactional producer (its id is useless without Write on its transactional id)
        and for the principal's own. An idempotent producer of another principal (or of
        nobody) is shown only to a principal with Describe on the cluster: its id, epoch
        and sequence are all a writer of the topic needs to write as it."""
        if self._authorizer is None or transactional_id is not None:
            return True
        if self._producer_owners.owner(producer_id) == str(principal):
            return True
        return self._authorizer.authorize(principal, host, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                          CLUSTER_NAME)

    def check_producer_owner(self, producer_id: int, principal: KafkaPrincipal, transactional: bool) -> None:
        """With the authorizer on, refuse a producer id that InitProducerId handed to
        another principal (``exactly/app/engine/principals.py``: durable, so the same after a
        restart; an id nobody is bound to is owned by the first principal to use it). The errors are the ones clients treat as
        fatal authorization failures, never retried: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        for a transactional producer's id (what it gets for a transactional id it may not
        write), CLUSTER_AUTHORIZATION_FAILED for an idempotent one's (what Kafka answers
        an idempotent producer without IdempotentWrite) -- not INVALID_PRODUCER_ID_MAPPING,
        on which clients re-initialize and retry."""
        if self._authorizer is None or self._producer_owners.claim(producer_id, str(principal)):
            return
        self.authorization_denied(principal, "*", AclOperation.WRITE, ResourceType.CLUSTER,
                                  f"producer id {producer_id}")
        if transactional:
            raise TransactionalIdAuthorizationFailedError(f"producer id {producer_id} belongs to another principal")
        raise ClusterAuthorizationFailedError(f"producer id {producer_id} belongs to another principal")

    def check_producer_id_rate(self, principal: KafkaPrincipal) -> None:
        """:raise ThrottlingQuotaExceededError: past ``exactly.producer.id.rate.per.principal``."""
        throttle_ms = self._producer_id_rate.throttle_ms(str(principal))
        if throttle_ms:
            self._counters.limit_refused("exactly.producer.id.rate.per.principal")
            raise ThrottlingQuotaExceededError(
                f"{principal} is past exactly.producer.id.rate.per.principal "
                f"({self._producer_id_rate.rate}/s); retry in {throttle_ms} ms", throttle_ms)

    @contextlib.contextmanager
    def admitted(self, principal: KafkaPrincipal | None, transactional_id: str) -> Iterator[None]:
        """A Kafka client's request that opens a transaction, counted as open while it runs
        (:class:`OpenTransactions`). Past ``exactly.max.open.transactions.per.principal`` it
        is refused with THROTTLING_QUOTA_EXCEEDED: retriable, so a Java producer retries
        until one of the principal's transactions ends (a timeout aborts it at the latest),
        librdkafka makes it an abortable error; the cap is a quota on a principal, not a
        policy on the request, hence not POLICY_VIOLATION."""
        if principal is None:
            yield
            return
        if not self._open_transactions.admit(str(principal), transactional_id):
            self._counters.limit_refused("exactly.max.open.transactions.per.principal")
            raise ThrottlingQuotaExceededError(
                f"{principal} has {self._open_transactions.cap} transactions open "
                "(exactly.max.open.transactions.per.principal); end one first")
        try:
            yield
        finally:
            self._open_transactions.settle(transactional_id)

    # -- ACLs --------------------------------------------------------------------------------

    def _acls(self) -> StandardAuthorizer:
        if self._authorizer is None:
            raise SecurityDisabledError("no authorizer is configured (authorizer.class.name)")
        return self._authorizer

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches. :raise SecurityDisabledError: no authorizer.
        :raise InvalidRequestError: an UNKNOWN value in the filter."""
        acl_filter.validate()
        return [binding for _, binding in self._acls().acls(acl_filter)]

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """Make each binding durable, then effective; per binding its error or None. An
        ACL that exists already succeeds without a new record (as in Kafka).
        :raise SecurityDisabledError: no authorizer."""
        authorizer = self._acls()
        results: list[KafkaError | None] = []
        new: dict[AclBinding, bytes] = {}
        async with self._acl_changes:
            for binding in bindings:
                results.append(_refusal(binding))
                if results[-1] is None and authorizer.id_of(binding) is None:
                    new.setdefault(binding, uuid.uuid4().bytes)
            try:
                await self._write_metadata([(cluster_metadata.encode_key(acl_id), cluster_metadata.encode_value(
                    binding.to_record(acl_id))) for binding, acl_id in new.items()])
            except KafkaError as e:
                return [r if r is not None else e for r in results]
            for binding, acl_id in new.items():
                authorizer.add_acl(acl_id, binding)
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | KafkaError]:
        """Remove what each filter matches (durably first); per filter the ACLs it
        removed (an ACL two filters match counts for the first) or its error.
        :raise SecurityDisabledError: no authorizer."""
        authorizer = self._acls()
        results: list[list[AclBinding] | KafkaError] = []
        doomed: dict[bytes, AclBinding] = {}
        async with self._acl_changes:
            for acl_filter in filters:
                refused = _refusal(acl_filter)
                if refused is not None:
                    results.append(refused)
                    continue
                matched = [(i, b) for i, b in authorizer.acls(acl_filter) if i not in doomed]
                doomed.update(matched)
                results.append([b for _, b in matched])
            try:
                await self._write_metadata([(cluster_metadata.encode_key(acl_id), None) for acl_id in doomed])
            except KafkaError as e:
                return [e if isinstance(r, list) else r for r in results]
            for acl_id in doomed:
                authorizer.remove_acl(acl_id)
        return results

    # -- users: SCRAM credentials (exactly/app/security/scram.py) ----------------------------------

    async def alter_scram_credentials(self, deletions: list[tuple[str, ScramMechanism]],
                                      upsertions: list[cluster_metadata.ScramCredentialRecord]) -> None:
        """Remove and set credentials, durably first, then for logins (one batch; the
        caller has checked each). :raise KafkaError: the write failed; nothing changed."""
        await self._write_metadata(
            [(cluster_metadata.encode_scram_key(user, mechanism), None) for user, mechanism in deletions]
            + [(cluster_metadata.encode_scram_key(r.name, r.mechanism), cluster_metadata.encode_scram_value(r))
               for r in upsertions])
        for user, mechanism in deletions:
            self.scram_credentials.remove(user, mechanism)
        for record in upsertions:
            self.scram_credentials.put(record)

    async def check_password(self, user: str, password: str) -> KafkaPrincipal | None:
        """``User:<user>`` when ``password`` is the user's (against any of its SCRAM
        credentials), else None. PBKDF2 runs on a worker thread, not the loop, once per
        SCRAM mechanism -- against the user's credential of it, or a dummy one where the
        user has none (an unknown user: every one) -- so a refusal takes as long whoever
        the user is (the time does not tell which users exist; bench/bench_login.py).
        One derivation runs at a time (:data:`PASSWORD_DERIVATIONS_AT_ONCE`), so password
        guessing from any number of connections or HTTP threads takes at most one core
        from producers and consumers."""
        known = {ScramMechanism(c.mechanism): c for c in self.scram_credentials.of_user(user)}
        for mechanism in SCRAM_MECHANISMS:
            credential = known.get(mechanism, self._dummy_credentials[mechanism])
            async with self._derivations:
                matches = await asyncio.to_thread(password_matches, credential, password)
            if matches and mechanism in known:
                return KafkaPrincipal(USER_TYPE, user)
        return None

    async def login_failed(self, face: str, mechanism: str, user: str | None, known: bool = False) -> None:
        """The one policy for a failed login on every face (``kafka`` SASL, ``http``
        Basic or Bearer, the ``console``'s form): counted in
        ``exactly_authentication_failures_total{face,mechanism,principal}`` -- the
        principal when it exists (``known``, or it has a credential), else ``unknown``,
        so guessed names cannot grow the metric -- logged, and answered only after
        ``connection.failed.authentication.delay.ms`` (Kafka's delay, which slows guessing
        on each connection or request thread alike)."""
        principal = (str(KafkaPrincipal(USER_TYPE, user)) if user and (known or self.scram_credentials.of_user(user))
                     else UNKNOWN_PRINCIPAL)
        self._counters.authentication_failed(face, mechanism, principal)
        log.info("%s: failed authentication of %s with %s", face, principal, mechanism)
        await asyncio.sleep(self._failed_login_delay_s)

    def authenticate_password(self, user: str, password: str) -> KafkaPrincipal | None:
        """:meth:`check_password` for a thread other than the loop's (HTTP Basic); blocks."""
        return self._bridge.call(self.check_password, user, password)

    def record_failed_login(self, face: str, mechanism: str, user: str | None, known: bool = False) -> None:
        """:meth:`login_failed` for a thread other than the loop's; blocks for the delay."""
        self._bridge.call(self.login_failed, face, mechanism, user, known)


def _refusal(acl: AclBinding | AclBindingFilter) -> KafkaError | None:
    """Why an ACL or filter is refused (INVALID_REQUEST), None when it is not."""
    try:
        acl.validate()
    except KafkaError as e:
        return e
    return None
