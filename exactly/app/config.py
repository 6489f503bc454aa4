"""Broker configuration: Kafka's config names and defaults.

Accepted everywhere a user gives config (``Broker(data_dir, **config)``,
``--config key=value``): Kafka's dotted names (``log.segment.bytes``), the same
with underscores (``log_segment_bytes=...`` as a Python keyword), and topic-level
names (``segment.bytes``) as the default for every topic. Unknown names are an
error, so a typo never silently does nothing. A few settings Kafka has no name for are
Exactly's own (``http.auth.token``, ``producer.snapshot.interval.ms``, and the
``exactly.`` ones such as ``exactly.jobs.enable``); docs/operations.md's config table lists every
setting (tests/test_config.py keeps it complete).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from exactly.app.listeners import (
    DEFAULT_PROTOCOL_MAP,
    ListenerSpec,
    SecurityProtocol,
    parse_endpoint,
    parse_listeners,
    parse_protocol_map,
)
from exactly.app.security.authorizer import AUTHORIZER_CLASS_NAMES, StandardAuthorizer, parse_super_users
from exactly.app.security.principal import KafkaPrincipal
from exactly.app.security.sasl_plain import PLAIN
from exactly.app.security.scram import ScramMechanism
from exactly.coordinator.features import TRANSACTION_VERSIONS
from exactly.coordinator.group_coordinator import GroupConfig
from exactly.coordinator.transaction_coordinator import CoordinatorConfig
from exactly.storage.errors import InvalidConfigError, InvalidRequestError
from exactly.storage.log_config import LogConfig, coerce

#: broker-level name -> topic-level name: the broker-wide default of each topic config
#: that Kafka names at broker level (Kafka's ``ServerTopicConfigSynonyms``; the
#: replication throttles have no broker-level name)
TOPIC_DEFAULTS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.downconversion.enable": "message.downconversion.enable",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.preallocate": "preallocate",
    "compression.type": "compression.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
_HOURS = {"log.retention.hours": "retention.ms", "log.roll.hours": "segment.ms"}
#: the broker-level names whose Kafka default is null: the topic default comes from
#: another name (``log.retention.hours``, ``log.roll.hours``, ``log.roll.jitter.hours``),
#: so DescribeConfigs shows no value and no DEFAULT_CONFIG synonym for them until set
NULL_DEFAULTS = frozenset({"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms"})
#: the settings no client is shown (DescribeConfigs answers null, REST and the console too):
#: Kafka's PASSWORD configs among this broker's, and Exactly's own secret
SENSITIVE_CONFIGS = frozenset({"ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                               "http.auth.token"})
#: the settings that are the period of a scheduled job (a period must be positive)
_PERIODS = ("_interval_ms", "_backoff_ms")
#: Kafka's Int.MAX default of the connection limits: no limit
INT32_MAX = 2**31 - 1
#: the SASL mechanisms this broker implements (Kafka's default GSSAPI is not one of them)
SASL_MECHANISMS = (PLAIN, *(m.mechanism_name for m in ScramMechanism if m is not ScramMechanism.UNKNOWN))


@dataclass(frozen=True)
class BrokerConfig(CoordinatorConfig, GroupConfig):
    """Broker-wide settings; attribute names are Kafka's with underscores.

    The transaction and group coordinators' settings are declared (names and
    defaults) beside the coordinators, in ``CoordinatorConfig`` and ``GroupConfig``
    (``exactly/coordinator/`` cannot import ``exactly/app/``); a BrokerConfig is both, so it is what
    the engine hands each coordinator. The broker's own settings follow.
    """

    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    transaction_state_log_segment_bytes: int = 104_857_600
    offsets_topic_segment_bytes: int = 104_857_600
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    producer_id_expiration_check_interval_ms: int = 600_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    log_retention_check_interval_ms: int = 300_000
    #: pause between log-cleaner rounds (Kafka's log.cleaner.backoff.ms)
    log_cleaner_backoff_ms: int = 15_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    #: how often every partition writes a producer-state snapshot (the seed: 30 to 60 s)
    producer_snapshot_interval_ms: int = 60_000
    #: when set, the HTTP API needs "Authorization: Bearer <token>" and the console a login
    http_auth_token: str = ""
    #: Exactly's own: the principal the HTTP token authenticates as (exactly/app/http/auth.py); with
    #: an authorizer on, list it in super.users to let the token do everything
    http_auth_token_principal: str = "User:admin"
    #: Exactly's own: one INFO line per HTTP request on the server log (exactly/app/http/access_log.py)
    exactly_http_access_log_enable: bool = True
    #: Exactly's own (Kafka has no such key): false runs no scheduled job and no mirror
    #: round, for tests that drive them by hand in a frozen world; never for a real broker
    exactly_jobs_enable: bool = True
    #: how often the SQLite mirror (<data-dir>/exactly.db) catches up with the logs
    exactly_mirror_interval_ms: int = 1_000
    #: the Kafka address clients are told to connect to (Metadata, FindCoordinator), per
    #: listener name, e.g. ``PLAINTEXT://broker.example:9092``; a listener not named here
    #: advertises the address it is bound to
    advertised_listeners: str = ""
    #: the Kafka listeners, ``NAME://host:port,...`` (``PLAINTEXT://127.0.0.1:9092,
    #: SASL_SSL://127.0.0.1:9094``); empty: one PLAINTEXT listener on ``--host``/``--kafka-port``
    listeners: str = ""
    #: each listener name's security protocol (Kafka's default: every protocol's own name)
    listener_security_protocol_map: str = DEFAULT_PROTOCOL_MAP
    #: the SASL mechanisms SASL listeners offer. Kafka's default, GSSAPI (Kerberos), means
    #: nothing here: the default is every mechanism this broker implements
    sasl_enabled_mechanisms: str = ",".join(SASL_MECHANISMS)
    #: KIP-368: a SASL session's lifetime; a client re-authenticates before it ends, and a
    #: connection past it that has not is closed at its next request. 0: sessions never end
    connections_max_reauth_ms: int = 0
    #: how long a failed SASL login waits before its answer (and the connection's close),
    #: which slows password guessing
    connection_failed_authentication_delay_ms: int = 100
    #: the TLS certificate of SSL and SASL_SSL listeners: PEM only (Kafka's other keystore
    #: types are Java's)
    ssl_keystore_type: str = "PEM"
    #: a PEM file holding the certificate chain and the private key
    ssl_keystore_location: str = ""
    #: instead of a file: the certificate chain and the key as PEM text
    ssl_keystore_certificate_chain: str = ""
    ssl_keystore_key: str = ""
    #: the password of an encrypted private key
    ssl_key_password: str = ""
    #: Exactly's own: with no certificate given, create a local CA and a certificate for
    #: 127.0.0.1 and localhost under <data-dir>/tls (reused on restart); clients trust the CA
    exactly_ssl_generate: bool = False
    #: the largest Kafka request frame accepted; a bigger one closes the connection
    socket_request_max_bytes: int = 104_857_600
    #: a Kafka connection with no traffic for this long is closed (one that stopped
    #: reading its responses included)
    connections_max_idle_ms: int = 600_000
    #: Kafka connections open at once, from anywhere; one more is closed as it is accepted.
    #: The HTTP listener holds at most as many of its own. Kafka's default is no limit;
    #: this one is sized for one machine (see docs/operations.md, "Descriptors")
    max_connections: int = 10_000
    #: Kafka connections open at once from one IP address; one more is closed as it is accepted
    max_connections_per_ip: int = INT32_MAX
    #: ``address:count,...``: per-IP exceptions to max.connections.per.ip (IP addresses only)
    max_connections_per_ip_overrides: str = ""
    #: Kafka's ``sasl.server.max.receive.size``: the largest frame a SASL connection may
    #: send before it has authenticated; a bigger size closes it as it is read
    sasl_server_max_receive_size: int = 524_288
    #: Exactly's own: an HTTP request whose head (request line and headers) has not all
    #: come this long after its first byte is closed (a client trickling a byte at a time)
    exactly_http_request_header_timeout_ms: int = 10_000
    #: Exactly's own: an HTTP connection that sends nothing for this long, in the middle
    #: of a request's body or between two requests, is closed
    exactly_http_request_body_timeout_ms: int = 30_000
    #: Exactly's own: the HTTP API's ``Idempotency-Key``s one principal may hold at once
    #: (each kept while its call can be retried: exactly/app/http/api/idempotency.py); a
    #: new one past that is 429 THROTTLING_QUOTA_EXCEEDED, never an eviction
    exactly_http_idempotency_keys_per_principal: int = 100_000
    #: Exactly's own (Kafka has no broker-wide partition limit): the partitions this broker
    #: holds at most; a topic creation or growth beyond it is POLICY_VIOLATION. Each
    #: partition keeps 3 files open, so 4,000 of them need 12,000 descriptors (bench/RESULTS.md)
    exactly_max_partitions: int = 4_000
    #: the authorizer: Kafka's StandardAuthorizer (or AclAuthorizer) class name switches
    #: ACLs on (exactly/app/security/authorizer.py); empty: off, every request allowed, ACL APIs
    #: answer SECURITY_DISABLED
    authorizer_class_name: str = ""
    #: ``User:alice;User:bob``: principals the authorizer lets do everything
    super_users: str = ""
    #: with the authorizer on, whether a resource no ACL names is open to everyone
    allow_everyone_if_no_acl_found: bool = False
    #: Exactly's own, KIP-936's idea: the producer ids (InitProducerId) one principal may
    #: get per second; more is THROTTLING_QUOTA_EXCEEDED (89). 0: no limit
    exactly_producer_id_rate_per_principal: int = 0
    #: Exactly's own: the transactions one principal may have open at once; another is
    #: THROTTLING_QUOTA_EXCEEDED (89) until one ends. 0: no limit
    exactly_max_open_transactions_per_principal: int = 0
    #: Exactly's own: true accepts a replication factor above 1 (an application written for a
    #: cluster asks for 3) and creates the topic with the one replica this node has, saying so
    #: in the answer and the log; false refuses it with INVALID_REPLICATION_FACTOR, as Kafka does
    exactly_replication_factor_ignore: bool = False
    log: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any]) -> "BrokerConfig":
        broker_fields = {f.name: f for f in fields(cls) if f.name != "log"}
        topic_names = {name.replace("_", "."): name for name in LogConfig().to_kafka()}
        broker: dict[str, Any] = {}
        topic: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = raw_key.replace("_", ".")
            attr = key.replace(".", "_")
            if attr in broker_fields:
                broker[attr] = coerce(key, value, broker_fields[attr].type)
            elif key in TOPIC_DEFAULTS:
                topic[TOPIC_DEFAULTS[key]] = value
            elif key in _HOURS:
                topic[_HOURS[key]] = coerce(key, value, "int") * 3600 * 1000
            elif key in topic_names:
                topic[key] = value
            else:
                raise InvalidConfigError(f"unknown config {raw_key!r}")
        config = cls(**broker, log=LogConfig.from_kafka(topic))
        for name in ("transaction_max_timeout_ms", "socket_request_max_bytes", "connections_max_idle_ms",
                     "sasl_server_max_receive_size", "exactly_http_request_header_timeout_ms",
                     "exactly_http_request_body_timeout_ms", "exactly_http_idempotency_keys_per_principal",
                     *(f.name for f in fields(cls) if f.name.endswith(_PERIODS))):
            if getattr(config, name) < 1:
                raise InvalidConfigError(f"{name.replace('_', '.')} must be >= 1")
        for name in ("max_connections", "max_connections_per_ip", "exactly_max_partitions",
                     "connections_max_reauth_ms", "connection_failed_authentication_delay_ms",
                     "exactly_producer_id_rate_per_principal", "exactly_max_open_transactions_per_principal"):
            if getattr(config, name) < 0:
                raise InvalidConfigError(f"{name.replace('_', '.')} must be >= 0")
        if config.transaction_version not in TRANSACTION_VERSIONS:
            raise InvalidConfigError(f"transaction.version must be one of {list(TRANSACTION_VERSIONS)}, "
                                     f"got {config.transaction_version}")
        config.advertised_listener()  # a malformed address is an error now, not at the first client
        config.listener_specs("127.0.0.1", 0)
        config.enabled_mechanisms()
        if config.ssl_keystore_type.upper() != "PEM":
            raise InvalidConfigError(f"ssl.keystore.type must be PEM, got {config.ssl_keystore_type!r}")
        config.connection_overrides()
        config.authorizer()
        try:
            KafkaPrincipal.parse(config.http_auth_token_principal)
        except InvalidRequestError as e:
            raise InvalidConfigError(f"http.auth.token.principal: {e}") from None
        return config

    def advertised_listener(self, name: str | None = None) -> tuple[str, int] | None:
        """``(host, port)`` the listener called ``name`` (None: the first one) advertises;
        None when ``advertised.listeners`` does not name it. :raise InvalidConfigError: malformed."""
        found = None
        for entry in filter(None, (e.strip() for e in self.advertised_listeners.split(","))):
            try:
                listener, host, port = parse_endpoint(entry)
            except ValueError:
                listener, port = "", 0
            if not 0 < port:
                raise InvalidConfigError(
                    f"advertised.listeners must look like PLAINTEXT://host:port, got {self.advertised_listeners!r}")
            if (name is None or listener == name.upper()) and found is None:
                found = host, port
        return found

    def listener_specs(self, host: str, port: int) -> list[ListenerSpec]:
        """The Kafka listeners: ``listeners``, or one PLAINTEXT listener on ``host:port``
        (``exactly serve --host --kafka-port``) when it is empty.
        :raise InvalidConfigError: a malformed entry or an unmapped name."""
        try:
            parse_protocol_map(self.listener_security_protocol_map)
            if not self.listeners.strip():
                return [ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, host, port)]
            return parse_listeners(self.listeners, self.listener_security_protocol_map)
        except ValueError as e:
            raise InvalidConfigError(f"listeners: {e}") from None

    def enabled_mechanisms(self) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` in order. :raise InvalidConfigError: one this broker lacks."""
        names = tuple(dict.fromkeys(filter(None, (m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",")))))
        unknown = [m for m in names if m not in SASL_MECHANISMS]
        if unknown:
            raise InvalidConfigError(f"sasl.enabled.mechanisms: {', '.join(unknown)} not supported "
                                     f"(supported: {', '.join(SASL_MECHANISMS)})")
        return names

    def authorizer(self) -> StandardAuthorizer | None:
        """A new, empty authorizer of these settings; None when ``authorizer.class.name``
        is empty. :raise InvalidConfigError: an unknown class name or a bad ``super.users``."""
        if not self.authorizer_class_name:
            return None
        if self.authorizer_class_name not in AUTHORIZER_CLASS_NAMES:
            raise InvalidConfigError(f"authorizer.class.name must be one of {sorted(AUTHORIZER_CLASS_NAMES)}, "
                                     f"got {self.authorizer_class_name!r}")
        try:
            super_users = parse_super_users(self.super_users)
        except InvalidRequestError as e:
            raise InvalidConfigError(f"super.users: {e}") from None
        return StandardAuthorizer(super_users, self.allow_everyone_if_no_acl_found)

    def connection_overrides(self) -> dict[str, int]:
        """``max.connections.per.ip.overrides`` as IP address -> most connections."""
        overrides: dict[str, int] = {}
        for entry in filter(None, (e.strip() for e in self.max_connections_per_ip_overrides.split(","))):
            address, _, count = entry.rpartition(":")
            try:
                ip, limit = str(ipaddress.ip_address(address.strip("[]"))), int(count)
            except ValueError:
                limit = -1
            if limit < 0:
                raise InvalidConfigError(f"max.connections.per.ip.overrides entries must look like "
                                         f"127.0.0.1:100, got {entry!r}")
            overrides[ip] = limit
        return overrides


def static_config_change(names: Any) -> InvalidRequestError:
    """The refusal of a change to broker configs: this broker's are static (set at
    start-up, changed with a restart), as Kafka refuses a read-only config."""
    return InvalidRequestError(f"Cannot update these configs dynamically: {sorted(set(names))}: they are "
                               "set at start-up (--config name=value) and change with a restart")
