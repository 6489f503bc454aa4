"""Kafka's type of each config this broker knows (DescribeConfigs v3+'s ``ConfigType``,
Kafka's ``ConfigDef.Type``), from the Python type each is declared with
(``exactly/storage/log_config.py``, ``exactly/app/config.py``) and the few places where
Kafka's differs: an int is INT or LONG as Kafka declares it, a list config is LIST,
a sensitive one PASSWORD."""

from __future__ import annotations

import enum
import functools
import typing
from dataclasses import fields

from exactly.app.config import SENSITIVE_CONFIGS, TOPIC_DEFAULTS, BrokerConfig
from exactly.storage.log_config import LogConfig


class ConfigType(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType``."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


#: Kafka's milliseconds that are INT (the others, and Exactly's own, are LONG)
_INT_MS = frozenset({
    "group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms",
    "transaction.max.timeout.ms", "transactional.id.expiration.ms", "producer.id.expiration.ms",
    "producer.id.expiration.check.interval.ms", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms", "log.flush.offset.checkpoint.interval.ms",
    "connection.failed.authentication.delay.ms",
})
#: Kafka's LONG configs that are not milliseconds
_LONG = frozenset({"retention.bytes", "flush.messages", "log.retention.bytes", "log.flush.interval.messages"})
#: Kafka's LIST configs among this broker's
_LIST = frozenset({"cleanup.policy", "log.cleanup.policy", "leader.replication.throttled.replicas",
                   "follower.replication.throttled.replicas", "sasl.enabled.mechanisms", "listeners", "advertised.listeners"})


@functools.cache
def _declared() -> dict[str, type]:
    """Every config's Python type, by Kafka's name."""
    topic = {name.replace("_", "."): kind for name, kind in typing.get_type_hints(LogConfig).items()
             if name in {f.name for f in fields(LogConfig)}}
    broker = {f.name.replace("_", "."): typing.get_type_hints(BrokerConfig)[f.name]
              for f in fields(BrokerConfig) if f.name != "log"}
    return {**topic, **{name: topic[topic_name] for name, topic_name in TOPIC_DEFAULTS.items()}, **broker}


def config_type(name: str, sensitive: bool = False) -> ConfigType:
    """Kafka's type of config ``name`` (UNKNOWN for a name this broker does not know)."""
    kind = _declared().get(name)
    if sensitive or name in SENSITIVE_CONFIGS:
        return ConfigType.PASSWORD
    if name in _LIST:
        return ConfigType.LIST
    if kind is bool:
        return ConfigType.BOOLEAN
    if kind is int:
        return ConfigType.LONG if name in _LONG or (name.endswith(".ms") and name not in _INT_MS) else ConfigType.INT
    if kind is float:
        return ConfigType.DOUBLE
    return ConfigType.STRING if kind is str else ConfigType.UNKNOWN
